"""Files a tool call wrote: found by a no-follow snapshot, named only when a report can show them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from runner.tools.base import ToolContext, ToolResult, tool
from runner.tools.registry import ToolRegistry
from runner.tools.written import MAX_REPORTED, checked_artifacts, take_snapshot, with_written_files


def test_snapshot_lists_regular_files_only_and_never_follows_links(workspace: Path, outside: Path) -> None:
    (outside / "host.txt").write_text("host")
    (workspace / "sub" / "deeper").mkdir(parents=True)
    (workspace / "sub" / "deeper" / "a.txt").write_text("a")
    (workspace / "top.csv").write_text("x")
    (workspace / "dir-link").symlink_to(outside, target_is_directory=True)
    (workspace / "sub" / "file-link.txt").symlink_to(outside / "host.txt")
    os.mkfifo(workspace / "pipe")
    (workspace / ".hidden").mkdir()
    (workspace / ".hidden" / "x.txt").write_text("x")
    (workspace / "__pycache__").mkdir()
    (workspace / "__pycache__" / "m.pyc").write_bytes(b"\x00")
    snapshot = take_snapshot(workspace)
    assert sorted(snapshot.files) == ["sub/deeper/a.txt", "top.csv"]
    assert snapshot.complete


def test_names_a_report_cannot_show_are_counted_not_listed(workspace: Path) -> None:
    fd = os.open(os.fsencode(workspace) + b"/bad-\xff.txt", os.O_WRONLY | os.O_CREAT)
    os.close(fd)
    (workspace / "line\nbreak.txt").write_text("x")
    os.mkdir(os.fsencode(workspace) + b"/bad-\xfe-dir")
    snapshot = take_snapshot(workspace)
    assert snapshot.files == {}
    assert len(snapshot.unreportable) == 3


def test_new_and_changed_files_become_artifacts(workspace: Path) -> None:
    (workspace / "kept.txt").write_text("same")
    (workspace / "changed.txt").write_text("before")
    before = take_snapshot(workspace)
    (workspace / "changed.txt").write_text("after!")
    (workspace / "new.bin").write_bytes(b"\x00")
    result = with_written_files(ToolResult("ok", artifacts=["named.png"]), before, take_snapshot(workspace))
    assert result.artifacts == ["named.png", "changed.txt", "new.bin"]
    assert result.content == "ok"


def test_a_flood_of_files_is_capped_with_a_note(workspace: Path) -> None:
    before = take_snapshot(workspace)
    for index in range(MAX_REPORTED + 7):
        (workspace / f"f{index:04d}.txt").write_text("x")
    result = with_written_files(ToolResult("ok"), before, take_snapshot(workspace))
    assert len(result.artifacts) == MAX_REPORTED
    assert "[note: 7 more written files are not reported as artifacts]" in result.content


def test_a_partial_listing_says_so(workspace: Path) -> None:
    for index in range(10):
        (workspace / f"f{index}.txt").write_text("x")
    snapshot = take_snapshot(workspace, max_entries=5)
    assert not snapshot.complete and len(snapshot.files) == 5
    result = with_written_files(ToolResult("ok"), take_snapshot(workspace), snapshot)
    assert "only part of it was checked" in result.content


@pytest.mark.parametrize(
    ("given", "kept"),
    [("./a//b.txt", "a/b.txt"), ("out/", "out"), ("ok.py", "ok.py"), ("é/ü (1).md", "é/ü (1).md")],
)
def test_artifact_paths_are_made_canonical(given: str, kept: str) -> None:
    assert checked_artifacts(ToolResult("", artifacts=[given])).artifacts == [kept]


@pytest.mark.parametrize("bad", ["../etc/passwd", "a/../../b", "/etc/passwd", "a\x00b", "a\nb", "bad\udcff", ""])
def test_unreportable_artifact_paths_are_dropped_with_a_note(bad: str) -> None:
    result = checked_artifacts(ToolResult("done", artifacts=[bad, "fine.txt"]))
    assert result.artifacts == ["fine.txt"]
    assert result.content.startswith("done\n[note: artifact not reported: refused")


async def test_the_registry_checks_what_any_tool_reports(ctx: ToolContext) -> None:
    @tool
    def liar() -> ToolResult:
        """Claims files outside the workspace."""
        return ToolResult("done", artifacts=["../../etc/passwd", "/etc/shadow", "./real.txt", "real.txt"])

    registry = ToolRegistry([liar])
    result = await registry.invoke("liar", "{}", ctx)
    assert result.artifacts == ["real.txt"]
    assert result.content.count("[note: artifact not reported") == 2


async def test_sandboxed_calls_report_what_they_wrote(registry: ToolRegistry, ctx: ToolContext) -> None:
    code = "import os; os.makedirs('out', exist_ok=True); open('out/r.csv', 'w').write('x'); os.symlink('/etc/passwd', 'l.txt'); print('ok')"
    result = await registry.invoke("python", {"code": code}, ctx)
    assert result.artifacts == ["out/r.csv"]
    again = await registry.invoke("shell", {"command": "echo more >> out/r.csv; echo y > s.txt"}, ctx)
    assert again.artifacts == ["out/r.csv", "s.txt"]
    untouched = await registry.invoke("shell", {"command": "cat out/r.csv"}, ctx)
    assert untouched.artifacts == []
