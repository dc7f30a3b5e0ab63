"""The batch journal in an SQLite file of its own (the default; see :mod:`runner.batch.journal`).

Durability: WAL with ``synchronous=NORMAL`` by default. A committed transaction survives
the process being killed (the WAL is in the OS page cache); only a power loss or kernel
crash can roll back the last few commits, and then whole transactions roll back, so a lost
``done`` mark means that row runs again (at-least-once holds, recording stays exactly-once).
``synchronous=FULL`` (``durable=True``) closes that window at the price of an fsync per
commit, made on the event loop thread. One process at a time: an exclusive ``flock`` on
``<journal>.lock`` refuses a second batch on the same journal; the kernel drops it if the
process dies, even by ``kill -9``.

The connection is used only from the event loop thread; each write is a small transaction.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sqlite3
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from runner.batch.journal import (
    COLUMNS,
    INTERRUPTED,
    RESUME_ERROR,
    SPENT,
    BatchJournal,
    JournalRow,
    ResumeState,
    RowOutcome,
    all_statuses,
    check_meta,
    clean,
    journal_row,
    new_meta,
    now_iso,
    spent_usage,
    usage_values,
)
from runner.core.usage import Usage
from runner.errors import UsageError
from runner.store.database import PAGE_CACHE_KIB

_SCHEMA = """
CREATE TABLE IF NOT EXISTS batch (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS rows (
    row_number INTEGER PRIMARY KEY,
    id TEXT,
    status TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    retryable INTEGER NOT NULL DEFAULT 1,
    inputs TEXT,
    output TEXT,
    error TEXT,
    error_kind TEXT,
    run_id TEXT,
    cost_usd REAL NOT NULL DEFAULT 0,
    input_tokens INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0,
    cached_input_tokens INTEGER NOT NULL DEFAULT 0,
    model_calls INTEGER NOT NULL DEFAULT 0,
    tool_calls INTEGER NOT NULL DEFAULT 0,
    duration_seconds REAL,
    warnings TEXT,
    created_at TEXT NOT NULL,
    started_at TEXT,
    finished_at TEXT
);
CREATE UNIQUE INDEX IF NOT EXISTS rows_by_id ON rows(id) WHERE status != 'invalid';
"""


class SqliteJournal(BatchJournal):
    """The SQLite journal of one batch: the file ``path``, locked by ``<path>.lock``."""

    def __init__(self, path: Path, connection: sqlite3.Connection, lock_fd: int) -> None:
        self.path = path
        self._db = connection
        self._lock_fd = lock_fd
        self.meta = dict(connection.execute("SELECT key, value FROM batch"))

    @classmethod
    def connect(cls, path: Path, wanted: Mapping[str, str], *, restart: bool, durable: bool) -> SqliteJournal:
        """Lock, (with ``restart``: delete,) open and check the journal file ``path``."""
        path.parent.mkdir(parents=True, exist_ok=True)
        lock_fd = _lock(path)
        try:
            if restart:
                for suffix in ("", "-wal", "-shm"):
                    Path(f"{path}{suffix}").unlink(missing_ok=True)
            db = _connect(path, durable)
            _check_or_init(db, path, wanted)
        except BaseException:
            os.close(lock_fd)
            raise
        return cls(path, db, lock_fd)

    def close(self) -> None:
        if self._lock_fd >= 0:
            self._db.close()
            os.close(self._lock_fd)
            self._lock_fd = -1

    # --- writes ----------------------------------------------------------------------

    def prepare_resume(self) -> ResumeState:
        with self._transaction() as db:
            runs = tuple(
                (int(number), str(run_id))
                for number, run_id in db.execute("SELECT row_number, run_id FROM rows WHERE status = 'running'")
            )
            interrupted = db.execute(
                "UPDATE rows SET status = 'failed', retryable = 1, error_kind = ?, finished_at = ?, error = ?"
                " WHERE status = 'running'",
                (INTERRUPTED, now_iso(), RESUME_ERROR),
            ).rowcount
            requeued = db.execute(
                "UPDATE rows SET status = 'pending', error = NULL, error_kind = NULL WHERE status = 'not_run'"
            ).rowcount
        return ResumeState(interrupted, requeued, runs)

    def correct_usage(self, number: int, usage: Usage) -> None:
        self._db.execute(
            "UPDATE rows SET input_tokens = ?, output_tokens = ?, cached_input_tokens = ?, cost_usd = ?, model_calls = ?,"
            " tool_calls = ? WHERE row_number = ?",
            (*usage_values(usage), number),
        )

    def mark_running(self, number: int, run_id: str) -> int:
        # One statement (autocommit), so it is its own transaction.
        (attempts,) = self._db.execute(
            "UPDATE rows SET status = 'running', attempts = attempts + 1, run_id = ?, started_at = ?"
            " WHERE row_number = ? RETURNING attempts",
            (run_id, now_iso(), number),
        ).fetchone()
        return int(attempts)

    def record(self, number: int, outcome: RowOutcome) -> bool:
        # One statement (autocommit): the result and the status land together or not at all.
        updated = self._db.execute(
            "UPDATE rows SET status = ?, output = ?, error = ?, error_kind = ?, retryable = ?,"
            " input_tokens = COALESCE(?, input_tokens), output_tokens = COALESCE(?, output_tokens),"
            " cached_input_tokens = COALESCE(?, cached_input_tokens), cost_usd = COALESCE(?, cost_usd),"
            " model_calls = COALESCE(?, model_calls), tool_calls = COALESCE(?, tool_calls),"
            " duration_seconds = ?, finished_at = ?, warnings = ? WHERE row_number = ? AND status = 'running'",
            (*outcome.values(), now_iso(), outcome.warnings_json(), number),
        ).rowcount
        return updated == 1

    def mark_not_run(self, reason: str, kind: str) -> int:
        with self._transaction() as db:
            return db.execute(
                "UPDATE rows SET status = 'not_run', error = ?, error_kind = ? WHERE status = 'pending'",
                (clean(reason), kind),
            ).rowcount

    # --- reads -----------------------------------------------------------------------

    def counts(self) -> dict[str, int]:
        return all_statuses(self._db.execute("SELECT status, COUNT(*) FROM rows GROUP BY status").fetchall())

    def spent(self) -> Usage:
        return spent_usage(self._db.execute(f"SELECT {SPENT} FROM rows").fetchone())

    def row(self, number: int) -> JournalRow | None:
        found = self._db.execute(f"SELECT {COLUMNS} FROM rows WHERE row_number = ?", (number,)).fetchone()
        return journal_row(found) if found else None

    # --- internals -------------------------------------------------------------------

    def _page(self, where: str, params: tuple[Any, ...], after: int, limit: int) -> list[tuple[Any, ...]]:
        query = f"SELECT {COLUMNS} FROM rows WHERE row_number > ? AND {where} ORDER BY row_number LIMIT ?"
        return list(self._db.execute(query, (after, *params, limit)).fetchall())

    def _insert(self, values: list[tuple[Any, ...]]) -> None:
        if values:
            with self._transaction() as db:
                db.executemany(
                    "INSERT OR IGNORE INTO rows (row_number, id, status, retryable, inputs, error, error_kind,"
                    " created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    values,
                )

    def _set_meta(self, values: Mapping[str, str]) -> None:
        with self._transaction() as db:
            db.executemany("INSERT OR REPLACE INTO batch VALUES (?, ?)", list(values.items()))

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield self._db
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")


def _lock(path: Path) -> int:
    fd = os.open(f"{path}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise UsageError(f"{path}: another batch process is using this journal; wait for it to end") from None
    return fd


def _connect(path: Path, durable: bool) -> sqlite3.Connection:
    db = sqlite3.connect(path, isolation_level=None)  # transactions are explicit
    db.execute("PRAGMA journal_mode = WAL")
    db.execute(f"PRAGMA synchronous = {'FULL' if durable else 'NORMAL'}")
    db.execute("PRAGMA busy_timeout = 5000")  # readers in other processes (progress, tests)
    db.execute(f"PRAGMA cache_size = -{PAGE_CACHE_KIB}")
    db.executescript(_SCHEMA)
    if "warnings" not in {row[1] for row in db.execute("PRAGMA table_info(rows)")}:  # a journal from before the column
        db.execute("ALTER TABLE rows ADD COLUMN warnings TEXT")
    return db


def _check_or_init(db: sqlite3.Connection, path: Path, wanted: Mapping[str, str]) -> None:
    meta = dict(db.execute("SELECT key, value FROM batch"))
    if not meta:
        db.execute("BEGIN IMMEDIATE")
        db.executemany("INSERT INTO batch VALUES (?, ?)", list(new_meta(wanted).items()))
        db.execute("COMMIT")
        return
    check_meta(meta, wanted, str(path))
