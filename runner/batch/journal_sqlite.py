"""The batch journal in an SQLite file of its own (the default; see :mod:`runner.batch.journal`).

The tables and transitions are :mod:`runner.batch.journal_sql`'s; this module adds the file
and its lock. Durability: WAL with ``synchronous=NORMAL`` by default. A committed
transaction survives the process being killed (the WAL is in the OS page cache); only a
power loss or kernel crash can roll back the last few commits, and then whole transactions
roll back, so a lost ``done`` mark means that row runs again (at-least-once holds, recording
stays exactly-once). ``synchronous=FULL`` (``durable=True``) closes that window at the price
of an fsync per commit, made on the event loop thread. One process at a time: an exclusive
``flock`` on ``<journal>.lock`` refuses a second batch on the same journal; the kernel drops
it if the process dies, even by ``kill -9``.

The connection is used only from the event loop thread; each write is a small transaction.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from pathlib import Path

from runner.batch.journal import SCHEMA_VERSION
from runner.batch.journal_sql import JournalLayout, SqlJournal, open_tables
from runner.store.database import SqliteDatabase
from runner.store.file_lock import held_lock_file

LAYOUT = JournalLayout(rows="rows", meta="batch")
"""An SQLite journal is a file of its own: its tables hold one journal."""


class SqliteJournal(SqlJournal):
    """The SQLite journal of one batch: the file ``path``, locked by ``<path>.lock``."""

    def __init__(self, path: Path, database: SqliteDatabase, lock_fd: int) -> None:
        super().__init__(path, database, LAYOUT)
        self._lock_fd = lock_fd

    @classmethod
    def connect(cls, path: Path, wanted: Mapping[str, str], *, restart: bool, durable: bool) -> SqliteJournal:
        """Lock, open and check the journal file ``path``. With ``restart`` a journal is emptied in
        place, in one transaction that keeps its provider batches for cancelling
        (:func:`~runner.batch.journal.carried_over`); a file that is not a readable journal of this
        schema is deleted (nothing to carry over)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        lock_fd = _lock(path)
        database: SqliteDatabase | None = None
        try:
            if restart and _meta_of(path).get("schema_version") != SCHEMA_VERSION:  # damaged, another file or layout
                for suffix in ("", "-wal", "-shm"):
                    Path(f"{path}{suffix}").unlink(missing_ok=True)
            # busy: readers in other processes (progress, tests) hold the file for moments only
            database = SqliteDatabase(path, busy_seconds=5, synchronous="FULL" if durable else "NORMAL", role="batch journal")
            database.commit_rank = 1  # in a group commit, after the run store its rows wrote to
            open_tables(database, LAYOUT, str(path), wanted, restart=restart)
        except BaseException:
            if database is not None:
                database.close()
            os.close(lock_fd)
            raise
        return cls(path, database, lock_fd)

    def close(self) -> None:
        if self._lock_fd >= 0:
            self._db.close()
            os.close(self._lock_fd)
            self._lock_fd = -1


def _meta_of(path: Path) -> dict[str, str]:
    """The metadata of the journal file ``path`` (under our lock), or nothing when it is missing or unreadable."""
    if not path.is_file():
        return {}
    import sqlite3

    try:
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)) as db:
            return {str(k): str(v) for k, v in db.execute(f"SELECT key, value FROM {LAYOUT.meta}")}
    except sqlite3.Error:  # not a journal any more (damaged, or another file): nothing to carry over
        return {}


def _lock(path: Path) -> int:
    busy = f"{path}: another batch process is using this journal; wait for it to end"
    return held_lock_file(Path(f"{path}.lock"), "the batch journal's lock", lambda fd: busy)
