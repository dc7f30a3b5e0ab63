"""Red-team attacks on the workspace a scripted model controls, through the real CLI, the real
bubblewrap sandbox and the loopback OpenAI server: deep trees that host-side code must still
measure and remove."""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from runner.model.server import ScriptedServer
from runner.tools.disk_quota import MIB
from tests.support.project import run_cli, sandbox_project, tool_call

pytestmark = pytest.mark.timeout(240)

AGENT = """\
apiVersion: runner/v1
kind: Agent
name: coder
model: {id: gpt-4o-mini, max_tokens: 100, retries: 0}
tools: [shell, write_file, list_files]
sandbox: {mode: bwrap, wall_seconds: 60, disk_mb: 20, max_file_mb: 16}
stuck: {max_repeats: 20}
"""
TASK = """\
apiVersion: runner/v1
kind: Task
name: deep
agent: coder
goal: Build a deep tree.
"""


@pytest.fixture
def project() -> Iterator[Path]:
    with sandbox_project("redteam-ws", {"agents.d/coder.yaml": AGENT, "tasks.d/deep.yaml": TASK}) as root:
        yield root


def tree_bytes(root: Path) -> int:
    """Apparent bytes of every regular file under ``root``, walked without recursion."""
    total, pending = 0, [str(root)]
    while pending:
        with os.scandir(pending.pop()) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    pending.append(entry.path)
                elif entry.is_file(follow_symlinks=False):
                    total += entry.stat(follow_symlinks=False).st_size
    return total


def observations(server: ScriptedServer) -> list[str]:
    messages = server.requests[-1].body["messages"]
    return [m["content"] for m in messages if m["role"] == "tool"]


def test_a_tree_nested_by_the_file_tools_cannot_hide_writes_from_the_disk_quota(project: Path) -> None:
    """The model nests a tree with write_file below what the quota walks (64 levels), then
    floods a directory of its own beside it: 120 MB used to land in a 20 MB workspace."""
    sixty = "a/" * 60
    flood = f"cd {sixty} && mkdir -p {'b/' * 10} && cd {'b/' * 10} && for i in 1 2 3 4 5 6 7 8; do head -c 15M /dev/zero > f$i; done"
    replies = [
        tool_call("shell", command=f"mkdir -p {sixty}"),
        tool_call("write_file", path=f"{sixty}{'r/' * 10}seed.txt", content="x"),
        tool_call("write_file", path=f"{'w/' * 40}seed.txt", content="x"),
        tool_call("shell", command=flood),
    ]
    rules = [{"times": 1, "reply": reply} for reply in replies] + [{"reply": {"content": "done"}}]
    with ScriptedServer({"rules": rules}) as server:
        done = run_cli(project, server, "run", "deep", "--run-id", "deep-1")
        seen = observations(server)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert "nested 71 levels deep; at most 32 are allowed" in seen[1]
    assert "nested 41 levels deep" in seen[2]
    assert "disk quota of 20 MB" in seen[3], seen[3]
    workspace = project / ".runner" / "workspaces" / "deep-1"
    assert tree_bytes(workspace) < 20 * MIB


def test_a_retry_wipes_a_workspace_thousands_of_levels_deep(project: Path) -> None:
    """A fresh retry removes the failed attempt's workspace; ``shutil.rmtree`` recursed once per
    level and died with a RecursionError traceback on a tree 3,000 levels deep."""
    rules = [{"times": 1, "reply": tool_call("write_file", path="note.txt", content="x")}, {"reply": {"fault": {"status": 400}}}]
    with ScriptedServer({"rules": rules}) as server:
        first = run_cli(project, server, "run", "deep", "--run-id", "deep-2")
    assert first.returncode == 1, first.stderr[-2000:]
    workspace = project / ".runner" / "workspaces" / "deep-2"
    outside = project / "outside.txt"
    outside.write_text("keep")
    fd = os.open(workspace, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(3000):  # what a tool with no depth limit (or a user's own copy) could leave
        os.mkdir("d", dir_fd=fd)
        child = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = child
    os.symlink(outside, "link", dir_fd=fd)
    os.close(fd)
    with ScriptedServer({"rules": [{"reply": {"content": "second try"}}]}) as server:
        again = run_cli(project, server, "run", "deep", "--run-id", "deep-2")
    assert again.returncode == 0, again.stderr[-3000:]
    assert "Traceback" not in again.stderr and again.stdout.strip() == "second try"
    assert outside.read_text() == "keep"
    assert not (workspace / "d").exists() and not (workspace / "note.txt").exists()
    assert [p.name for p in workspace.parent.iterdir()] == ["deep-2"]  # no leftover of the removal
    with sqlite3.connect(project / ".runner" / "runs.sqlite3") as db:
        assert db.execute("SELECT status FROM runs WHERE run_id = 'deep-2'").fetchone() == ("completed",)


QUOTA_AGENT = """\
apiVersion: runner/v1
kind: Agent
name: coder
model: {id: gpt-4o-mini, max_tokens: 100}
tools: [shell, load_table, write_file]
sandbox: {mode: bwrap, wall_seconds: 60, disk_mb: 6}
stuck: {max_repeats: 20}
"""


def test_tools_writing_on_the_host_respect_the_disk_quota(project: Path) -> None:
    """write_file and load_table write on the host, where the sandbox's quota watch does not
    look: saving one 2 MB file as table after table used to fill the disk unchecked."""
    (project / "agents.d" / "coder.yaml").write_text(QUOTA_AGENT)
    make = "python3 -c \"import random; random.seed(1); print('a,b'); [print(random.random(), random.random(), sep=',') for _ in range(80000)]\" > d.csv"
    replies = [tool_call("shell", command=make)]
    replies += [tool_call("load_table", path="d.csv", name=f"t{i}") for i in range(6)]
    replies += [tool_call("write_file", path=f"w{i}.txt", content="x" * 900_000) for i in range(4)]
    rules = [{"times": 1, "reply": reply} for reply in replies] + [{"reply": {"content": "done"}}]
    with ScriptedServer({"rules": rules}) as server:
        done = run_cli(project, server, "run", "deep", "--run-id", "quota-1", "--json")
    assert done.returncode == 0, done.stderr[-2000:]
    results = [e for e in map(json.loads, done.stdout.splitlines()) if e.get("event") == "tool_call"]
    refused = [e for e in results if "past its disk quota of 6 MB (sandbox.disk_mb)" in (e.get("output_excerpt") or "")]
    assert {e["name"] for e in refused} == {"load_table", "write_file"}, [e.get("output_excerpt") for e in results]
    assert tree_bytes(project / ".runner" / "workspaces" / "quota-1") <= 6 * MIB
