"""The host side of a run workspace: copying task files in and wiping never follow a link.

These call :mod:`runner.runs.workspace` directly on a real file system; the CLI tests in
``tests/cli/test_workspace_tampering.py`` drive the same code through resumes and batch
retries with a real sandbox.
"""

from __future__ import annotations

import contextlib
import os
import socket
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from runner.errors import EXIT_FAILED, WorkspaceTampered
from runner.runs.workspace import copy_into_workspace, default_workspace, wipe_workspace

ORIGINAL = b"host file: keep me\n"


@pytest.fixture
def source(tmp_path: Path) -> Path:
    path = tmp_path / "project" / "data" / "input.csv"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"a,b\n1,2\n")
    return path


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = default_workspace(tmp_path / "project", "run-1")
    path.mkdir(parents=True)
    return path


@pytest.fixture
def host(tmp_path: Path) -> Path:
    path = tmp_path / "host"
    path.mkdir()
    (path / "secret.txt").write_bytes(ORIGINAL)
    return path


@pytest.fixture
def sock(workspace: Path) -> Iterator[None]:
    # Bound by a relative name: a socket's path is limited to 108 bytes, and pytest-xdist's
    # temporary directories are deeper than that.
    with socket.socket(socket.AF_UNIX) as server:
        with contextlib.chdir(workspace):
            server.bind("input.csv")
        yield


def test_copies_a_new_file_and_leaves_an_identical_one_alone(source: Path, workspace: Path) -> None:
    copy_into_workspace(workspace, source, "input.csv")
    target = workspace / "input.csv"
    assert target.read_bytes() == source.read_bytes()
    inode = target.stat().st_ino
    copy_into_workspace(workspace, source, "input.csv")
    assert target.stat().st_ino == inode  # identical: not rewritten
    assert [p.name for p in workspace.iterdir()] == ["input.csv"]  # no temporary file left behind


def test_replaces_a_changed_plain_file(source: Path, workspace: Path) -> None:
    (workspace / "input.csv").write_bytes(b"edited by the model\n")
    copy_into_workspace(workspace, source, "input.csv")
    assert (workspace / "input.csv").read_bytes() == source.read_bytes()


def test_same_size_different_content_is_replaced(source: Path, workspace: Path) -> None:
    (workspace / "input.csv").write_bytes(b"x" * source.stat().st_size)
    copy_into_workspace(workspace, source, "input.csv")
    assert (workspace / "input.csv").read_bytes() == source.read_bytes()


def refusal(workspace: Path, source: Path) -> str:
    with pytest.raises(WorkspaceTampered) as raised:
        copy_into_workspace(workspace, source, "input.csv")
    assert raised.value.exit_code == EXIT_FAILED
    return str(raised.value)


def test_a_symlink_to_a_host_file_is_refused_and_not_written_through(source: Path, workspace: Path, host: Path) -> None:
    (workspace / "input.csv").symlink_to(host / "secret.txt")
    message = refusal(workspace, source)
    assert f"was replaced by a symbolic link (to '{host / 'secret.txt'}')" in message
    assert (host / "secret.txt").read_bytes() == ORIGINAL
    assert (workspace / "input.csv").is_symlink()  # left as evidence, never followed


def test_a_symlink_to_a_missing_host_path_creates_nothing(source: Path, workspace: Path, host: Path) -> None:
    (workspace / "input.csv").symlink_to(host / "new.txt")
    assert "symbolic link" in refusal(workspace, source)
    assert not (host / "new.txt").exists()


def test_a_dangling_relative_symlink_is_refused(source: Path, workspace: Path) -> None:
    (workspace / "input.csv").symlink_to("../../../../outside.csv")
    assert "symbolic link" in refusal(workspace, source)


def test_a_fifo_is_refused_without_blocking(source: Path, workspace: Path) -> None:
    os.mkfifo(workspace / "input.csv")
    assert "was replaced by a FIFO" in refusal(workspace, source)
    assert stat.S_ISFIFO(os.lstat(workspace / "input.csv").st_mode)


@pytest.mark.usefixtures("sock")
def test_a_socket_is_refused(source: Path, workspace: Path) -> None:
    assert "was replaced by a socket" in refusal(workspace, source)


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")
def test_a_device_is_refused(source: Path, workspace: Path) -> None:
    os.mknod(workspace / "input.csv", 0o600 | stat.S_IFCHR, os.makedev(1, 3))  # /dev/null
    assert "was replaced by a character device" in refusal(workspace, source)


def test_a_hardlink_to_a_host_file_is_refused(source: Path, workspace: Path, host: Path) -> None:
    os.link(host / "secret.txt", workspace / "input.csv")
    assert "a file with 2 hard links" in refusal(workspace, source)
    assert (host / "secret.txt").read_bytes() == ORIGINAL


def test_a_directory_in_place_of_the_file_is_refused(source: Path, workspace: Path, host: Path) -> None:
    (workspace / "input.csv").mkdir()
    (workspace / "input.csv" / "x").symlink_to(host / "secret.txt")
    assert "was replaced by a directory" in refusal(workspace, source)
    assert (host / "secret.txt").read_bytes() == ORIGINAL


def test_a_symlinked_source_in_the_project_is_not_read(tmp_path: Path, workspace: Path, host: Path) -> None:
    link = tmp_path / "project" / "data" / "linked.csv"
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(host / "secret.txt")
    with pytest.raises(OSError):
        copy_into_workspace(workspace, link, "linked.csv")
    assert not (workspace / "linked.csv").exists()


def test_wipe_deletes_links_but_not_their_targets(workspace: Path, host: Path) -> None:
    (workspace / "file-link").symlink_to(host / "secret.txt")
    (workspace / "dir-link").symlink_to(host, target_is_directory=True)
    (workspace / "sub" / "deeper").mkdir(parents=True)
    (workspace / "sub" / "deeper" / "link").symlink_to(host, target_is_directory=True)
    os.link(host / "secret.txt", workspace / "hard")
    os.mkfifo(workspace / "pipe")
    wipe_workspace(workspace)
    assert not workspace.exists()
    assert sorted(p.name for p in host.iterdir()) == ["secret.txt"]
    assert (host / "secret.txt").read_bytes() == ORIGINAL


def test_wipe_of_a_missing_workspace_is_a_no_op(tmp_path: Path) -> None:
    wipe_workspace(tmp_path / "never-made")


def test_wipe_refuses_a_workspace_that_is_a_link_or_a_file(tmp_path: Path, host: Path) -> None:
    link = tmp_path / "ws-link"
    link.symlink_to(host, target_is_directory=True)
    with pytest.raises(WorkspaceTampered, match="not a directory"):
        wipe_workspace(link)
    plain = tmp_path / "ws-file"
    plain.write_text("x")
    with pytest.raises(WorkspaceTampered, match="not a directory"):
        wipe_workspace(plain)
    assert (host / "secret.txt").read_bytes() == ORIGINAL
