"""Workspace confinement of the file tools and of host-side workspace reads."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from runner.errors import ToolFailure
from runner.tools import paths
from runner.tools.paths import (
    WorkspacePathError,
    list_workspace_files,
    read_workspace_file,
    write_workspace_file,
)

pytestmark = pytest.mark.timeout(120)
SECRET = "OUTSIDE-SECRET"


@pytest.fixture(params=["openat2", "component-walk"])
def resolver(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run each test with openat2 and with the O_NOFOLLOW fallback."""
    if request.param == "openat2":
        assert paths._openat2_works(), "openat2 should work on the test host"
    else:
        monkeypatch.setattr(paths, "_openat2_works", lambda: False)
    return request.param


@pytest.fixture
def secret_outside(outside: Path) -> Path:
    target = outside / "secret.txt"
    target.write_text(SECRET)
    return target


async def read(registry, ctx, path: str) -> str:
    return (await registry.invoke("read_file", {"path": path}, ctx)).content


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("../secret.txt", "'..'"),
        ("a/../../secret.txt", "'..'"),
        ("/etc/passwd", "absolute"),
        ("notes\x00.txt", "NUL"),
    ],
)
async def test_lexical_escapes_are_refused(registry, ctx, resolver, path, reason):
    with pytest.raises(ToolFailure, match=reason):
        await read(registry, ctx, path)


async def test_sibling_prefix_directory_is_unreachable(registry, ctx, workspace, resolver):
    sibling = Path(f"{workspace}-evil")
    sibling.mkdir()
    try:
        (sibling / "secret.txt").write_text(SECRET)
        for path in (f"../{workspace.name}-evil/secret.txt", f"{workspace}-evil/secret.txt"):
            with pytest.raises(ToolFailure):
                await read(registry, ctx, path)
        with pytest.raises(ToolFailure):
            await registry.invoke("write_file", {"path": f"../{workspace.name}-evil/x", "content": "x"}, ctx)
        assert not (sibling / "x").exists()
    finally:
        for child in sibling.iterdir():
            child.unlink()
        sibling.rmdir()


async def test_symlinked_file_is_refused(registry, ctx, workspace, secret_outside, resolver):
    (workspace / "link.txt").symlink_to(secret_outside)
    with pytest.raises(ToolFailure, match="symbolic link"):
        await read(registry, ctx, "link.txt")


async def test_symlinked_directory_in_the_path_is_refused(registry, ctx, workspace, secret_outside, resolver):
    (workspace / "data").symlink_to(secret_outside.parent)
    with pytest.raises(ToolFailure, match="symbolic link"):
        await read(registry, ctx, "data/secret.txt")
    with pytest.raises(ToolFailure, match="symbolic link"):
        await registry.invoke("write_file", {"path": "data/new.txt", "content": "x"}, ctx)
    assert not (secret_outside.parent / "new.txt").exists()


async def test_write_replaces_a_symlink_instead_of_following_it(registry, ctx, workspace, secret_outside, resolver):
    (workspace / "out.txt").symlink_to(secret_outside)
    await registry.invoke("write_file", {"path": "out.txt", "content": "new"}, ctx)
    assert secret_outside.read_text() == SECRET
    assert not (workspace / "out.txt").is_symlink()
    assert (workspace / "out.txt").read_text() == "new"


async def test_hardlinked_file_is_refused(registry, ctx, workspace, outside, resolver):
    target = workspace / "data.txt"
    target.write_text(SECRET)
    os.link(target, workspace / "alias.txt")
    with pytest.raises(ToolFailure, match="hard links"):
        await read(registry, ctx, "alias.txt")


async def test_fifo_is_refused_without_blocking(registry, ctx, workspace, resolver):
    os.mkfifo(workspace / "pipe")
    with pytest.raises(ToolFailure, match="not a regular file"):
        await read(registry, ctx, "pipe")


def test_symlink_swap_race_never_leaks(workspace, secret_outside, resolver):
    """A directory on the path is swapped for a symlink to the outside while we read."""
    (workspace / "sub").mkdir()
    (workspace / "sub" / "secret.txt").write_text("inside")
    stop = threading.Event()

    def swap() -> None:
        while not stop.is_set():
            os.rename(workspace / "sub", workspace / "sub.real")
            os.symlink(secret_outside.parent, workspace / "sub")
            os.unlink(workspace / "sub")
            os.rename(workspace / "sub.real", workspace / "sub")

    swapper = threading.Thread(target=swap)
    swapper.start()
    leaks = reads = 0
    try:
        for _ in range(2000):
            try:
                data = read_workspace_file(workspace, "sub/secret.txt", 1000)
            except WorkspacePathError:
                continue
            reads += 1
            leaks += SECRET.encode() in data
    finally:
        stop.set()
        swapper.join()
    assert leaks == 0


def test_report_helpers_do_not_follow_links(workspace, secret_outside, resolver):
    (workspace / "report.md").write_text("# ok")
    (workspace / "leak.md").symlink_to(secret_outside)
    (workspace / "dir").symlink_to(secret_outside.parent, target_is_directory=True)
    entries = {e.path: e.kind for e in list_workspace_files(workspace)}
    assert entries == {"dir": "symlink", "leak.md": "symlink", "report.md": "file"}
    assert read_workspace_file(workspace, "report.md", 100) == b"# ok"
    with pytest.raises(WorkspacePathError):
        read_workspace_file(workspace, "leak.md", 100)


def test_write_is_atomic_and_leaves_no_temp_files(workspace, resolver):
    write_workspace_file(workspace, "a/b.txt", b"one")
    write_workspace_file(workspace, "a/b.txt", b"two")
    assert (workspace / "a" / "b.txt").read_bytes() == b"two"
    assert sorted(p.name for p in (workspace / "a").iterdir()) == ["b.txt"]


async def test_file_tools_happy_path(registry, ctx, workspace):
    result = await registry.invoke("write_file", {"path": "notes/today.md", "content": "héllo\nworld"}, ctx)
    assert result.artifacts == ["notes/today.md"]
    assert (await read(registry, ctx, "notes/today.md")) == "héllo\nworld"
    partial = await registry.invoke("read_file", {"path": "notes/today.md", "max_bytes": 3}, ctx)
    assert "truncated" in partial.content
    listing = await registry.invoke("list_files", {"recursive": True}, ctx)
    assert "notes/today.md" in listing.content
    assert {"path": "notes", "kind": "dir", "size": 0} in listing.data


async def test_missing_file_message_names_the_path(registry, ctx):
    with pytest.raises(ToolFailure, match=r"'nope\.txt' does not exist"):
        await read(registry, ctx, "nope.txt")
