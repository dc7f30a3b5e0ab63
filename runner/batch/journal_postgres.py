"""The batch journal in PostgreSQL (see :mod:`runner.batch.journal`): shared by every worker.

Every journal's rows live in the tables ``journal_rows`` and ``journal_meta`` under the
journal's name (the path it would have as a file), so a retry on any worker that names the
same database and journal resumes it. The transitions are the SQLite journal's, statement
for statement: ``UPDATE ... RETURNING`` to start an attempt, one conditional ``UPDATE ...
WHERE status = 'running'`` to record a result with its status, one transaction for resume.

One process at a time: a session-level advisory lock keyed by the journal's name, taken
with ``pg_try_advisory_lock`` when the journal opens and held by its connection.
PostgreSQL releases it when that session ends: on :meth:`close`, when the process dies
(its socket closes), or when its host goes silent (TCP keepalives end the session in about
a minute). A second process is refused, naming the session that holds the journal.

Durability is the server's (``synchronous_commit``); ``durable=True`` makes sure it is on.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import socket
from collections.abc import Mapping
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
from runner.store.database import PostgresDatabase

SCHEMA = """
CREATE TABLE IF NOT EXISTS journal_meta (
    journal TEXT NOT NULL,
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    PRIMARY KEY (journal, key)
);
CREATE TABLE IF NOT EXISTS journal_rows (
    journal TEXT NOT NULL,
    row_number BIGINT NOT NULL,
    id TEXT,
    status TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    retryable INTEGER NOT NULL DEFAULT 1,
    inputs TEXT,
    output TEXT,
    error TEXT,
    error_kind TEXT,
    run_id TEXT,
    cost_usd DOUBLE PRECISION NOT NULL DEFAULT 0,
    input_tokens BIGINT NOT NULL DEFAULT 0,
    output_tokens BIGINT NOT NULL DEFAULT 0,
    cached_input_tokens BIGINT NOT NULL DEFAULT 0,
    model_calls INTEGER NOT NULL DEFAULT 0,
    tool_calls INTEGER NOT NULL DEFAULT 0,
    duration_seconds DOUBLE PRECISION,
    warnings TEXT,
    created_at TEXT NOT NULL,
    started_at TEXT,
    finished_at TEXT,
    PRIMARY KEY (journal, row_number)
);
CREATE UNIQUE INDEX IF NOT EXISTS journal_rows_by_id ON journal_rows (journal, id) WHERE status <> 'invalid';
"""


class PostgresJournal(BatchJournal):
    """The journal named ``path`` in a PostgreSQL database, locked by its connection's session."""

    def __init__(self, path: Path, database: PostgresDatabase) -> None:
        self.path = path
        self.name = str(path)
        self._db = database
        self._open = True
        self.meta = self._read_meta()

    @classmethod
    def connect(cls, url: str, path: Path, wanted: Mapping[str, str], *, restart: bool, durable: bool) -> PostgresJournal:
        """Connect, lock the journal ``path`` (refusing a second process), (with ``restart``:
        delete it,) then create or check it."""
        name = str(path)
        database = PostgresDatabase(url, application_name=f"runner batch {socket.gethostname()} pid {os.getpid()}"[:63])
        try:
            database.script(SCHEMA)
            _lock(database, name)
            if durable:
                database.execute("SET synchronous_commit = on")
            if restart:
                with database.transaction() as db:
                    db.execute("DELETE FROM journal_rows WHERE journal = ?", (name,))
                    db.execute("DELETE FROM journal_meta WHERE journal = ?", (name,))
            _check_or_init(database, name, wanted)
        except BaseException:
            database.close()
            raise
        return cls(path, database)

    def close(self) -> None:
        if self._open:
            self._open = False
            import psycopg

            # Released here, not left to the session's end: the server ends a closed session in its
            # own time, and the next process to open this journal may be faster. On a broken
            # connection the session's end releases it.
            with contextlib.suppress(psycopg.Error):
                self._db.execute("SELECT pg_advisory_unlock(?)", (lock_key(self.name),))
            self._db.close()

    # --- writes ----------------------------------------------------------------------

    def prepare_resume(self) -> ResumeState:
        with self._db.transaction() as db:
            runs = tuple(
                (int(r["row_number"]), str(r["run_id"]))
                for r in db.rows(
                    "SELECT row_number, run_id FROM journal_rows WHERE journal = ? AND status = 'running'"
                    " ORDER BY row_number",
                    (self.name,),
                )
            )
            interrupted = db.execute(
                "UPDATE journal_rows SET status = 'failed', retryable = 1, error_kind = ?, finished_at = ?, error = ?"
                " WHERE journal = ? AND status = 'running'",
                (INTERRUPTED, now_iso(), RESUME_ERROR, self.name),
            )
            requeued = db.execute(
                "UPDATE journal_rows SET status = 'pending', error = NULL, error_kind = NULL"
                " WHERE journal = ? AND status = 'not_run'",
                (self.name,),
            )
        return ResumeState(interrupted, requeued, runs)

    def correct_usage(self, number: int, usage: Usage) -> None:
        self._db.execute(
            "UPDATE journal_rows SET input_tokens = ?, output_tokens = ?, cached_input_tokens = ?, cost_usd = ?,"
            " model_calls = ?, tool_calls = ? WHERE journal = ? AND row_number = ?",
            (*usage_values(usage), self.name, number),
        )

    def mark_running(self, number: int, run_id: str) -> int:
        # One statement (autocommit), so it is its own transaction.
        started = self._db.row(
            "UPDATE journal_rows SET status = 'running', attempts = attempts + 1, run_id = ?, started_at = ?"
            " WHERE journal = ? AND row_number = ? RETURNING attempts",
            (run_id, now_iso(), self.name, number),
        )
        if started is None:
            raise KeyError(f"journal {self.name}: no row {number}")
        return int(started["attempts"])

    def record(self, number: int, outcome: RowOutcome) -> bool:
        # One statement (autocommit): the result and the status land together or not at all.
        updated = self._db.execute(
            "UPDATE journal_rows SET status = ?, output = ?, error = ?, error_kind = ?, retryable = ?,"
            " input_tokens = COALESCE(?, input_tokens), output_tokens = COALESCE(?, output_tokens),"
            " cached_input_tokens = COALESCE(?, cached_input_tokens), cost_usd = COALESCE(?, cost_usd),"
            " model_calls = COALESCE(?, model_calls), tool_calls = COALESCE(?, tool_calls),"
            " duration_seconds = ?, finished_at = ?, warnings = ? WHERE journal = ? AND row_number = ? AND status = 'running'",
            (*outcome.values(), now_iso(), outcome.warnings_json(), self.name, number),
        )
        return updated == 1

    def mark_not_run(self, reason: str, kind: str) -> int:
        return self._db.execute(
            "UPDATE journal_rows SET status = 'not_run', error = ?, error_kind = ? WHERE journal = ? AND status = 'pending'",
            (clean(reason), kind, self.name),
        )

    # --- reads -----------------------------------------------------------------------

    def counts(self) -> dict[str, int]:
        found = self._db.rows(
            "SELECT status, COUNT(*) AS n FROM journal_rows WHERE journal = ? GROUP BY status", (self.name,)
        )
        return all_statuses((r["status"], r["n"]) for r in found)

    def spent(self) -> Usage:
        found = self._db.row(f"SELECT {SPENT} FROM journal_rows WHERE journal = ?", (self.name,))
        assert found is not None
        return spent_usage(tuple(found.values()))

    def row(self, number: int) -> JournalRow | None:
        found = self._db.row(
            f"SELECT {COLUMNS} FROM journal_rows WHERE journal = ? AND row_number = ?", (self.name, number)
        )
        return journal_row(tuple(found.values())) if found else None

    # --- internals -------------------------------------------------------------------

    def _page(self, where: str, params: tuple[Any, ...], after: int, limit: int) -> list[tuple[Any, ...]]:
        query = (
            f"SELECT {COLUMNS} FROM journal_rows WHERE journal = ? AND row_number > ? AND {where}"
            " ORDER BY row_number LIMIT ?"
        )
        return [tuple(r.values()) for r in self._db.rows(query, (self.name, after, *params, limit))]

    def _insert(self, values: list[tuple[Any, ...]]) -> None:
        if values:
            with self._db.transaction() as db:
                db.executemany(
                    "INSERT INTO journal_rows (journal, row_number, id, status, retryable, inputs, error, error_kind,"
                    " created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                    [(self.name, *v) for v in values],
                )

    def _set_meta(self, values: Mapping[str, str]) -> None:
        with self._db.transaction() as db:
            db.executemany(
                "INSERT INTO journal_meta (journal, key, value) VALUES (?, ?, ?)"
                " ON CONFLICT (journal, key) DO UPDATE SET value = excluded.value",
                [(self.name, key, value) for key, value in values.items()],
            )

    def _read_meta(self) -> dict[str, str]:
        return _meta(self._db, self.name)


def journal_exists(url: str, name: str) -> bool:
    """Whether the journal ``name`` was created in the database at ``url``."""
    database = PostgresDatabase(url)
    try:
        table = database.row("SELECT to_regclass('journal_meta') IS NOT NULL AS present")
        if table is None or not table["present"]:
            return False
        return database.row("SELECT 1 AS found FROM journal_meta WHERE journal = ? LIMIT 1", (name,)) is not None
    finally:
        database.close()


def lock_key(name: str) -> int:
    """The advisory lock of journal ``name``: 64 bits of a SHA-256 (the same on every worker)."""
    return int.from_bytes(hashlib.sha256(f"runner journal:{name}".encode()).digest()[:8], "big", signed=True)


def _lock(database: PostgresDatabase, name: str) -> None:
    key = lock_key(name)
    taken = database.row("SELECT pg_try_advisory_lock(?) AS taken", (key,))
    if taken is None or not taken["taken"]:
        raise UsageError(
            f"journal {name} in {database.where}: another batch process is using this journal{_holder(database, key)}; "
            "wait for it to end"
        )


def _holder(database: PostgresDatabase, key: int) -> str:
    """`` (session 1234, 'runner batch host pid 99' from 10.0.0.7)``, or nothing if it cannot be seen."""
    high, low = (key >> 32) & 0xFFFFFFFF, key & 0xFFFFFFFF  # how pg_locks shows a bigint advisory key
    found = database.row(
        "SELECT a.pid, a.application_name, a.client_addr::text AS client FROM pg_locks l"
        " JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory' AND l.granted"
        " AND l.classid::bigint = ? AND l.objid::bigint = ? AND l.objsubid = 1 LIMIT 1",
        (high, low),
    )
    if found is None:
        return ""
    client = f" from {found['client']}" if found.get("client") else ""
    return f" (session {found['pid']}, {found['application_name']!r}{client})"


def _meta(database: PostgresDatabase, name: str) -> dict[str, str]:
    return {r["key"]: r["value"] for r in database.rows("SELECT key, value FROM journal_meta WHERE journal = ?", (name,))}


def _check_or_init(database: PostgresDatabase, name: str, wanted: Mapping[str, str]) -> None:
    meta = _meta(database, name)
    if not meta:
        with database.transaction() as db:
            db.executemany(
                "INSERT INTO journal_meta (journal, key, value) VALUES (?, ?, ?)",
                [(name, key, value) for key, value in new_meta(wanted).items()],
            )
        return
    check_meta(meta, wanted, f"journal {name} in {database.where}")
