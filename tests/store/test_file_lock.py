"""The lock file the SQLite journal and a local output are held by: one holder at a time, and
a link planted where the lock goes is refused instead of followed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from runner.batch.journal_sqlite import SqliteJournal
from runner.errors import UsageError
from runner.store.file_lock import held_lock_file


def test_a_second_holder_is_refused_with_the_callers_message_until_the_first_lets_go(tmp_path: Path) -> None:
    lock = tmp_path / "x.lock"
    first = held_lock_file(lock, "the test's lock", lambda fd: "unused")
    os.pwrite(first, b"held by pid 1", 0)
    with pytest.raises(UsageError, match="busy: held by pid 1"):
        held_lock_file(lock, "the test's lock", lambda fd: "busy: " + os.pread(fd, 100, 0).decode())
    os.close(first)
    os.close(held_lock_file(lock, "the test's lock", lambda fd: "unused"))


def test_a_busy_message_that_fails_leaves_no_descriptor_open(tmp_path: Path) -> None:
    lock = tmp_path / "x.lock"
    first = held_lock_file(lock, "the test's lock", lambda fd: "unused")
    before = set(os.listdir("/proc/self/fd"))

    def broken(fd: int) -> str:
        raise RuntimeError("reading the holder failed")

    with pytest.raises(RuntimeError, match="reading the holder failed"):
        held_lock_file(lock, "the test's lock", broken)
    assert set(os.listdir("/proc/self/fd")) == before
    os.close(first)


def test_a_symbolic_link_is_not_followed(tmp_path: Path) -> None:
    elsewhere = tmp_path / "precious.txt"
    elsewhere.write_text("keep me")
    (tmp_path / "x.lock").symlink_to(elsewhere)
    with pytest.raises(UsageError, match=r"x\.lock \(the test's lock\) is a symbolic link"):
        held_lock_file(tmp_path / "x.lock", "the test's lock", lambda fd: "unused")
    assert elsewhere.read_text() == "keep me"


def test_a_hard_link_is_refused_for_the_journal_as_for_the_output(tmp_path: Path) -> None:
    elsewhere = tmp_path / "precious.txt"
    elsewhere.write_text("keep me")
    os.link(elsewhere, tmp_path / "journal.sqlite3.lock")
    with pytest.raises(UsageError, match=r"journal\.sqlite3\.lock \(the batch journal's lock\) is a hard link"):
        SqliteJournal.connect(tmp_path / "journal.sqlite3", {}, restart=False, durable=False)
    assert elsewhere.read_text() == "keep me"
