"""The batch journal's tables and row transitions, written once for both backends.

:class:`SqlJournal` runs every transition of :mod:`runner.batch.journal` through the
:class:`~runner.store.database.Database` interface the run store uses: ``?`` placeholders,
``INSERT ... ON CONFLICT``, ``UPDATE ... RETURNING``. What the backends keep to themselves
is where a journal lives (:class:`JournalLayout`: an SQLite file's own tables, or a name in
PostgreSQL's shared tables) and how one process holds it (a ``flock``, an advisory lock).

Every write may be repeated after a dropped connection without being applied twice: the
ones that set values are idempotent, and the transitions that count or move a row
(``mark_running``, ``record``, ``mark_not_run``, ``prepare_resume``) write a fresh token in
the rows they change, so a repeat first looks for it to tell whether the lost try committed.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner.batch.journal import (
    COLUMNS,
    INTERRUPTED,
    RESUME_ERROR,
    SPENT,
    USAGE_COLUMNS,
    BatchJournal,
    JournalRow,
    ResumeState,
    RowOutcome,
    all_statuses,
    carried_over,
    check_meta,
    clean,
    journal_row,
    new_meta,
    now_iso,
    usage_from,
    usage_values,
)
from runner.core.usage import Usage
from runner.store.database import Database
from runner.store.schema import AddedColumn, Schema

_KEPT_UNLESS_GIVEN = ", ".join(f"{column} = COALESCE(?, {column})" for column in USAGE_COLUMNS)
"""A row's usage columns set from an outcome's values, or kept when it gives none (an interrupted attempt)."""
DDL = """
CREATE TABLE IF NOT EXISTS {meta} (
    {key_column}key TEXT NOT NULL,
    value TEXT NOT NULL,
    PRIMARY KEY ({key_prefix}key)
);
CREATE TABLE IF NOT EXISTS {rows} (
    {key_column}row_number {bigint} NOT NULL,
    id TEXT,
    status TEXT NOT NULL,
    attempts {int} NOT NULL DEFAULT 0,
    retryable {int} NOT NULL DEFAULT 1,
    inputs TEXT,
    output TEXT,
    error TEXT,
    error_kind TEXT,
    run_id TEXT,
    cost_usd {real} NOT NULL DEFAULT 0,
    input_tokens {bigint} NOT NULL DEFAULT 0,
    output_tokens {bigint} NOT NULL DEFAULT 0,
    cached_input_tokens {bigint} NOT NULL DEFAULT 0,
    model_calls {int} NOT NULL DEFAULT 0,
    tool_calls {int} NOT NULL DEFAULT 0,
    reasoning_tokens {bigint} NOT NULL DEFAULT 0,
    cache_write_tokens {bigint} NOT NULL DEFAULT 0,
    duration_seconds {real},
    warnings TEXT,
    created_at TEXT NOT NULL,
    started_at TEXT,
    finished_at TEXT,
    token TEXT,
    fingerprint TEXT,
    budget_warnings TEXT,
    degraded TEXT,
    PRIMARY KEY ({key_prefix}row_number)
);
CREATE UNIQUE INDEX IF NOT EXISTS {rows}_by_id ON {rows} ({key_prefix}id) WHERE status <> 'invalid'
"""
"""The journal's tables: ``{meta}`` (key -> value) and ``{rows}`` (one per input row), named by the layout."""
ADDED = (
    AddedColumn("{rows}", "warnings", "TEXT"),  # journals from before warnings were recorded
    AddedColumn("{rows}", "token", "TEXT"),  # journals from before writes were repeated after a lost connection
    AddedColumn("{rows}", "fingerprint", "TEXT"),  # journals from before answers named the configuration they were made under
    AddedColumn("{rows}", "budget_warnings", "TEXT"),  # journals from before budget warnings were kept with their rows
    AddedColumn("{rows}", "degraded", "TEXT"),  # journals from before budgets degraded to fallback models
    *(AddedColumn("{rows}", column, "{bigint} NOT NULL DEFAULT 0") for column in ("reasoning_tokens", "cache_write_tokens")),  # before they were kept
)


@dataclass(frozen=True)
class JournalLayout:
    """Where a journal's rows live: tables of its own (``name`` is ``None``: an SQLite file
    is one journal), or the rows named ``name`` in tables every journal shares (PostgreSQL)."""

    rows: str
    meta: str
    name: str | None = None

    @property
    def mine(self) -> str:
        """The condition that selects this journal's rows (with :attr:`key` as its parameters)."""
        return "journal = ?" if self.name is not None else "1 = 1"

    @property
    def key(self) -> tuple[str, ...]:
        return (self.name,) if self.name is not None else ()

    def schema(self) -> Schema:
        """The journal tables in this layout (one declaration, see :data:`DDL`)."""
        shared = self.name is not None
        names = {
            "rows": self.rows, "meta": self.meta, "key_column": "journal TEXT NOT NULL,\n    " if shared else "",
            "key_prefix": "journal, " if shared else "",
        }  # fmt: skip
        return Schema(DDL, ADDED, tuple(names.items()))

    def insert(self, table: str, columns: str) -> str:
        """``INSERT INTO table (<key column,> columns) VALUES (?, ...)`` (the key's values go first)."""
        names = ("journal, " if self.name is not None else "") + columns
        return f"INSERT INTO {table} ({names}) VALUES ({', '.join('?' for _ in names.split(','))})"


class SqlJournal(BatchJournal):
    """A journal in ``database`` laid out as ``layout``; a backend adds how it is opened and locked."""

    def __init__(self, path: Path, database: Database, layout: JournalLayout) -> None:
        self.path = path
        self._db = database
        self._layout = layout
        self.meta = read_meta(database, layout)

    # --- writes ----------------------------------------------------------------------

    def prepare_resume(self) -> ResumeState:
        token, rows, mine = new_token(), self._layout.rows, self._layout.mine

        def resume(db: Database) -> ResumeState:
            running = db.rows(f"SELECT row_number, run_id FROM {rows} WHERE {mine} AND status = 'running' ORDER BY row_number",
                              self._layout.key)  # fmt: skip
            interrupted = db.execute(
                f"UPDATE {rows} SET status = 'failed', retryable = 1, error_kind = ?, finished_at = ?, error = ?, token = ?"
                f" WHERE {mine} AND status = 'running'",
                (INTERRUPTED, now_iso(), RESUME_ERROR, token, *self._layout.key),
            )
            requeued = db.execute(
                f"UPDATE {rows} SET status = 'pending', error = NULL, error_kind = NULL, token = ?"
                f" WHERE {mine} AND status = 'not_run'",
                (token, *self._layout.key),
            )
            return ResumeState(interrupted, requeued, tuple((int(r["row_number"]), str(r["run_id"])) for r in running))

        def resumed(db: Database) -> ResumeState | None:
            found = db.rows(f"SELECT row_number, run_id, status FROM {rows} WHERE {mine} AND token = ? ORDER BY row_number",
                            (*self._layout.key, token))  # fmt: skip
            if not found:
                return None
            runs = tuple((int(r["row_number"]), str(r["run_id"])) for r in found if r["status"] == "failed")
            return ResumeState(len(runs), sum(r["status"] == "pending" for r in found), runs)

        return self._db.atomic(resume, check=resumed)

    def correct_usage(self, number: int, usage: Usage) -> None:
        self._db.execute(
            f"UPDATE {self._layout.rows} SET {', '.join(f'{column} = ?' for column in USAGE_COLUMNS)}"
            f" WHERE {self._layout.mine} AND row_number = ?",
            (*usage_values(usage), *self._layout.key, number),
            idempotent=True,
        )

    def mark_running(self, number: int, run_id: str) -> int:
        token, rows, mine = new_token(), self._layout.rows, self._layout.mine

        def start(db: Database) -> int:
            started = db.row(
                f"UPDATE {rows} SET status = 'running', attempts = attempts + 1, run_id = ?, started_at = ?, token = ?"
                f" WHERE {mine} AND row_number = ? RETURNING attempts",
                (run_id, now_iso(), token, *self._layout.key, number),
            )
            if started is None:
                raise KeyError(f"journal {self.path}: no row {number}")
            return int(started["attempts"])

        def started(db: Database) -> int | None:
            found = db.row(f"SELECT attempts FROM {rows} WHERE {mine} AND row_number = ? AND token = ?",
                           (*self._layout.key, number, token))  # fmt: skip
            return int(found["attempts"]) if found else None

        return self._db.checked(start, check=started)

    def record(self, number: int, outcome: RowOutcome) -> bool:
        # One statement: the result and the status land together or not at all.
        token, rows, mine = new_token(), self._layout.rows, self._layout.mine
        given_back = 0 if outcome.counts_attempt else 1
        values = (*outcome.values(), now_iso(), outcome.warnings_json(), outcome.budget_warnings_json(), outcome.degraded_json(), token, given_back,
                  *self._layout.key, number)  # fmt: skip

        def write(db: Database) -> bool:
            return db.execute(
                f"UPDATE {rows} SET status = ?, output = ?, error = ?, error_kind = ?, retryable = ?, {_KEPT_UNLESS_GIVEN},"
                f" duration_seconds = ?, finished_at = ?, warnings = ?, budget_warnings = ?, degraded = ?, token = ?, attempts = attempts - ?"
                f" WHERE {mine} AND row_number = ?"
                " AND status = 'running'",
                values,
            ) == 1

        def written(db: Database) -> bool | None:
            found = db.row(f"SELECT 1 AS found FROM {rows} WHERE {mine} AND row_number = ? AND token = ?",
                           (*self._layout.key, number, token))  # fmt: skip
            return True if found else None

        return self._db.checked(write, check=written)

    def mark_not_run(self, reason: str, kind: str) -> int:
        token, rows, mine = new_token(), self._layout.rows, self._layout.mine

        def mark(db: Database) -> int:
            return db.execute(
                f"UPDATE {rows} SET status = 'not_run', error = ?, error_kind = ?, token = ? WHERE {mine} AND status = 'pending'",
                (clean(reason), kind, token, *self._layout.key),
            )

        def marked(db: Database) -> int | None:
            found = db.row(f"SELECT COUNT(*) AS n FROM {rows} WHERE {mine} AND token = ?", (*self._layout.key, token))
            return int(found["n"]) if found and found["n"] else None

        return self._db.checked(mark, check=marked)

    def _stamp_done(self, fingerprint: str) -> int:
        return self._db.execute(
            f"UPDATE {self._layout.rows} SET fingerprint = ? WHERE {self._layout.mine} AND status = 'done' AND fingerprint IS NULL",
            (fingerprint, *self._layout.key),
            idempotent=True,
        )

    # --- reads -----------------------------------------------------------------------

    def counts(self) -> dict[str, int]:
        found = self._db.rows(
            f"SELECT status, COUNT(*) AS n FROM {self._layout.rows} WHERE {self._layout.mine} GROUP BY status",
            self._layout.key,
        )
        return all_statuses((r["status"], r["n"]) for r in found)

    def spent(self) -> Usage:
        found = self._db.row(f"SELECT {SPENT} FROM {self._layout.rows} WHERE {self._layout.mine}", self._layout.key)
        assert found is not None
        return usage_from(tuple(found.values()))

    def row(self, number: int) -> JournalRow | None:
        found = self._db.row(
            f"SELECT {COLUMNS} FROM {self._layout.rows} WHERE {self._layout.mine} AND row_number = ?",
            (*self._layout.key, number),
        )
        return journal_row(tuple(found.values())) if found else None

    # --- internals -------------------------------------------------------------------

    def _page(self, where: str, params: tuple[Any, ...], after: int, limit: int) -> list[tuple[Any, ...]]:
        query = (
            f"SELECT {COLUMNS} FROM {self._layout.rows} WHERE {self._layout.mine} AND row_number > ? AND {where}"
            " ORDER BY row_number LIMIT ?"
        )
        return [tuple(r.values()) for r in self._db.rows(query, (*self._layout.key, after, *params, limit))]

    def _insert(self, values: list[tuple[Any, ...]]) -> None:
        if values:
            sql = self._layout.insert(
                self._layout.rows, "row_number, id, status, retryable, inputs, error, error_kind, created_at"
            ) + " ON CONFLICT DO NOTHING"
            rows = [(*self._layout.key, *v) for v in values]
            self._db.atomic(lambda db: db.executemany(sql, rows))  # a row already there is left alone: safe to repeat

    def _set_meta(self, values: Mapping[str, str]) -> None:
        set_meta(self._db, self._layout, values)


def new_token() -> str:
    """A transition's token (see the module doc)."""
    return uuid.uuid4().hex


def read_meta(database: Database, layout: JournalLayout) -> dict[str, str]:
    """The journal's metadata (empty for a journal not created yet)."""
    found = database.rows(f"SELECT key, value FROM {layout.meta} WHERE {layout.mine}", layout.key)
    return {str(r["key"]): str(r["value"]) for r in found}


def set_meta(database: Database, layout: JournalLayout, values: Mapping[str, str]) -> None:
    """Insert or replace metadata entries, in one transaction (safe to repeat)."""
    conflict = "(journal, key)" if layout.name is not None else "(key)"
    sql = layout.insert(layout.meta, "key, value") + f" ON CONFLICT {conflict} DO UPDATE SET value = excluded.value"
    rows = [(*layout.key, key, value) for key, value in values.items()]
    database.atomic(lambda db: db.executemany(sql, rows))


def open_tables(database: Database, layout: JournalLayout, where: str, wanted: Mapping[str, str], *, restart: bool) -> None:
    """Create the journal's tables, (with ``restart``: empty it, keeping what :func:`carried_over`
    says in the new metadata, in the same transaction,) then create its metadata or check that it
    belongs to this batch (``where`` names it in the refusal)."""
    database.create(layout.schema())
    conflict = "(journal, key)" if layout.name is not None else "(key)"
    sql = layout.insert(layout.meta, "key, value") + f" ON CONFLICT {conflict} DO NOTHING"  # two openers at once: one wins
    if restart:
        fresh = {**new_meta(wanted), **carried_over(read_meta(database, layout))}
        rows = [(*layout.key, key, value) for key, value in fresh.items()]

        def wipe(db: Database) -> None:  # safe to repeat: the same rows again
            for table in (layout.rows, layout.meta):
                db.execute(f"DELETE FROM {table} WHERE {layout.mine}", layout.key)
            db.executemany(sql, rows)

        database.atomic(wipe)
    elif not read_meta(database, layout):
        rows = [(*layout.key, key, value) for key, value in new_meta(wanted).items()]
        database.atomic(lambda db: db.executemany(sql, rows))
    check_meta(read_meta(database, layout), wanted, where)
