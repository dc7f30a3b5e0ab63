"""Switching an SQLite file to WAL mode while another connection holds it (runner.core.sqlite_faults.wal_mode)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from runner.core.sqlite_faults import wal_mode


def test_a_file_held_by_another_connection_is_refused_as_busy_once_the_wait_is_over(tmp_path: Path) -> None:
    path = tmp_path / "held.sqlite3"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("CREATE TABLE t(x)")
    holder.execute("BEGIN EXCLUSIVE")  # a rollback-mode file another process writes: no switch possible
    opener = sqlite3.connect(path, isolation_level=None, timeout=0)
    try:
        with pytest.raises(sqlite3.OperationalError) as caught:
            wal_mode(opener, 0.2)
        assert caught.value.sqlite_errorcode & 0xFF == sqlite3.SQLITE_BUSY
        holder.execute("COMMIT")
        wal_mode(opener, 0.2)  # once released, the switch goes through
        assert opener.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        opener.close()
        holder.close()


def test_a_file_that_is_not_a_database_is_not_retried(tmp_path: Path) -> None:
    path = tmp_path / "text.sqlite3"
    path.write_text("not a database, " * 100)
    connection = sqlite3.connect(path, isolation_level=None)
    try:
        with pytest.raises(sqlite3.DatabaseError) as caught:
            wal_mode(connection, 30)  # refused at once: not a lock to wait for
        assert caught.value.sqlite_errorcode == sqlite3.SQLITE_NOTADB
    finally:
        connection.close()
