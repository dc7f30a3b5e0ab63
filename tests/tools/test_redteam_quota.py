"""The disk quota and the workspace wipe on trees deeper than the quota's walk (64 levels)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from runner.errors import ToolFailure
from runner.tools.bwrap import NOBODY
from runner.tools.disk_quota import MAX_DEPTH, remove_tree
from runner.tools.paths import MAX_PATH_DEPTH, WorkspacePathError, split_relative, write_workspace_file
from runner.tools.sandbox import SandboxPolicy, run_command

pytestmark = pytest.mark.timeout(120)


def nest(root: Path, depth: int, owner: int | None = None) -> Path:
    current = root
    for _ in range(depth):
        current = current / "n"
        current.mkdir()
        if owner is not None:
            os.chown(current, owner, owner)
    return current


def test_a_workspace_already_deeper_than_the_walk_runs_no_sandboxed_call(workspace: Path) -> None:
    """Before, a tree too deep before the call excused the call: what it wrote below level 64
    was never counted (120 MB went into a 20 MB workspace) nor removed."""
    bottom = nest(workspace, MAX_DEPTH + 6, owner=NOBODY if os.geteuid() == 0 else None)
    relative = bottom.relative_to(workspace)
    command = f"cd {relative} && for i in 1 2 3; do head -c 15000000 /dev/zero > f$i; done; touch /workspace/ran"
    with pytest.raises(ToolFailure, match="nested more than 64 directories deep"):
        run_command(["/bin/sh", "-c", command], workspace, SandboxPolicy(disk_mb=20, wall_seconds=60))
    assert not any(bottom.glob("f*")) and not (workspace / "ran").exists()


def test_file_tools_never_nest_deeper_than_the_quota_can_measure(workspace: Path) -> None:
    assert MAX_PATH_DEPTH < MAX_DEPTH
    write_workspace_file(workspace, "d/" * (MAX_PATH_DEPTH - 1) + "ok.txt", b"x")
    with pytest.raises(WorkspacePathError, match=f"at most {MAX_PATH_DEPTH} are allowed"):
        write_workspace_file(workspace, "d/" * MAX_PATH_DEPTH + "deep.txt", b"x")
    with pytest.raises(WorkspacePathError, match="levels deep"):
        split_relative("./" * 5 + "a/" * (MAX_PATH_DEPTH + 1))


@pytest.mark.slow(reason="removes a tree thousands of levels deep")
def test_remove_tree_handles_thousands_of_levels_and_never_follows_links(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("host")
    tree = tmp_path / "ws"
    tree.mkdir()
    fd = os.open(tree, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(3000):
        os.mkdir("d", dir_fd=fd)
        child = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = child
    os.symlink(outside, "out", dir_fd=fd)
    os.close(fd)
    (tree / "top-link").symlink_to(outside)
    remove_tree(tree)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["outside"]
    assert (outside / "keep.txt").read_text() == "host"
