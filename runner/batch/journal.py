"""The batch journal: one durable SQLite record per input row, for resume and exactly-once recording.

Every input row gets a record when the batch starts (``ingest``), keyed by its row number
(stable, since the input file's SHA-256 is pinned) with its id unique among valid rows. A
row moves ``pending -> running -> done | failed | not_run``; invalid rows are ``invalid``
from the start. A row's result and its ``done`` mark are one UPDATE, hence one transaction:
a crash leaves either both or neither, never an output without its mark or the reverse.

Resume (:meth:`BatchJournal.prepare_resume`): rows left ``running`` by a crash become
``failed`` (``interrupted``, retryable; the attempt counts), ``not_run`` rows become
``pending`` again, ``done`` rows are never selected again, and failed rows are retried while
``attempts < max_attempts``. Money and tokens already recorded are returned by
:meth:`BatchJournal.spent` so the caller counts them against the batch caps.

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
import datetime as dt
import fcntl
import json
import os
import sqlite3
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

from runner.batch.inputs import Row
from runner.core.usage import Usage
from runner.errors import UsageError

RowStatus = Literal["pending", "running", "done", "failed", "invalid", "not_run"]
"""A journal row's status: ``pending -> running -> done | failed | not_run``; ``invalid`` from the start."""
STATUSES: tuple[RowStatus, ...] = get_args(RowStatus)
SCHEMA_VERSION = "2"
INTERRUPTED = "interrupted"

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
_COLUMNS = (
    "row_number, id, status, attempts, retryable, inputs, output, error, error_kind, run_id,"
    " input_tokens, output_tokens, cached_input_tokens, cost_usd, model_calls, tool_calls,"
    " duration_seconds, started_at, finished_at, warnings"
)


@dataclass(frozen=True)
class JournalRow:
    """A row as the journal holds it. ``usage`` is its run's total over every attempt."""

    number: int
    id: str | None
    status: RowStatus
    attempts: int
    retryable: bool
    inputs: dict[str, Any] | None
    output: Any
    error: str | None
    error_kind: str | None
    run_id: str | None
    usage: Usage
    duration_seconds: float | None
    started_at: str | None
    finished_at: str | None
    warnings: tuple[str, ...] = ()  # e.g. spend counted at its worst case after a crash


@dataclass(frozen=True)
class RowOutcome:
    """How one attempt ended, to be recorded in one transaction.

    ``usage`` is the run's total so far, all attempts included (what ``execute_task``
    reports for a resumed run id); ``None`` keeps the recorded values (an interrupted
    attempt reports nothing).
    """

    status: RowStatus  # done | failed | not_run
    output: Any = None
    error: str | None = None
    error_kind: str | None = None
    retryable: bool = True
    usage: Usage | None = None
    duration_seconds: float | None = None
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class ResumeState:
    """What :meth:`BatchJournal.prepare_resume` found."""

    interrupted: int  # rows left running by a dead process, now failed (retryable)
    requeued: int  # rows not run last time, now pending again
    interrupted_runs: tuple[tuple[int, str], ...] = ()  # (row number, run id) of the interrupted rows


class BatchJournal:
    """The SQLite journal of one batch. Open with :meth:`open`; close it (or use ``with``)."""

    def __init__(self, path: Path, connection: sqlite3.Connection, lock_fd: int) -> None:
        self.path = path
        self._db = connection
        self._lock_fd = lock_fd
        self.meta = dict(connection.execute("SELECT key, value FROM batch"))

    @classmethod
    def open(
        cls,
        path: str | Path,
        *,
        task: str,
        input_path: Path,
        input_sha256: str,
        options: Mapping[str, Any] | None = None,
        restart: bool = False,
        durable: bool = False,
    ) -> BatchJournal:
        """Open or create the journal at ``path`` for this task and input.

        An existing journal for another task, input content or input options is refused
        (:class:`UsageError`) unless ``restart`` deletes it and starts over.
        """
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        lock_fd = _lock(path)
        try:
            if restart:
                for suffix in ("", "-wal", "-shm"):
                    Path(f"{path}{suffix}").unlink(missing_ok=True)
            db = _connect(path, durable)
            wanted = {
                "task": task,
                "input_path": str(Path(input_path).resolve()),
                "input_sha256": input_sha256,
                "options": json.dumps(dict(options or {}), sort_keys=True),
            }
            _check_or_init(db, path, wanted)
        except BaseException:
            os.close(lock_fd)
            raise
        return cls(path, db, lock_fd)

    # --- metadata --------------------------------------------------------------------

    @property
    def batch_id(self) -> str:
        """Random at creation, kept across resumes (``--restart`` makes a new one)."""
        return self.meta["batch_id"]

    @property
    def ingested(self) -> bool:
        return self.meta.get("ingested") == "1"

    def close(self) -> None:
        """Close the connection and release the journal lock."""
        if self._lock_fd >= 0:
            self._db.close()
            os.close(self._lock_fd)
            self._lock_fd = -1

    def __enter__(self) -> BatchJournal:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # --- writes ----------------------------------------------------------------------

    def ingest(self, rows: Iterable[Row], *, chunk_rows: int = 1000) -> int:
        """Record every row as ``pending`` or ``invalid``; idempotent, committed in chunks."""
        now, count, chunk = _now(), 0, []
        for row in rows:
            chunk.append(_ingest_values(row, now))
            count += 1
            if len(chunk) >= chunk_rows:
                self._insert(chunk)
                chunk = []
        self._insert(chunk)
        with self._transaction() as db:
            db.execute("INSERT OR REPLACE INTO batch VALUES ('ingested', '1'), ('row_count', ?)", (str(count),))
        self.meta.update(ingested="1", row_count=str(count))
        return count

    def prepare_resume(self) -> ResumeState:
        """Turn rows a dead process left ``running`` into retryable failures; requeue ``not_run``."""
        with self._transaction() as db:
            runs = tuple(
                (int(number), str(run_id))
                for number, run_id in db.execute("SELECT row_number, run_id FROM rows WHERE status = 'running'")
            )
            interrupted = db.execute(
                "UPDATE rows SET status = 'failed', retryable = 1, error_kind = ?, finished_at = ?,"
                " error = 'interrupted: the batch process ended while this row was running'"
                " WHERE status = 'running'",
                (INTERRUPTED, _now()),
            ).rowcount
            requeued = db.execute(
                "UPDATE rows SET status = 'pending', error = NULL, error_kind = NULL WHERE status = 'not_run'"
            ).rowcount
        return ResumeState(interrupted, requeued, runs)

    def correct_usage(self, number: int, usage: Usage) -> None:
        """Replace row ``number``'s usage by its run's ledger (after a crash the journal missed
        what the interrupted attempt spent)."""
        self._db.execute(
            "UPDATE rows SET input_tokens = ?, output_tokens = ?, cached_input_tokens = ?, cost_usd = ?, model_calls = ?,"
            " tool_calls = ? WHERE row_number = ?",
            (usage.input_tokens, usage.output_tokens, usage.cached_input_tokens, usage.cost_usd, usage.model_calls,
             usage.tool_calls, number),
        )

    def age_seconds(self) -> float:
        """Seconds since this batch was created (its first attempt started)."""
        created = dt.datetime.fromisoformat(self.meta["created_at"])
        return (dt.datetime.now(dt.UTC) - created).total_seconds()

    def mark_running(self, number: int, run_id: str) -> int:
        """Start an attempt at row ``number``; returns its attempt number (1-based)."""
        # One statement (autocommit), so it is its own transaction.
        (attempts,) = self._db.execute(
            "UPDATE rows SET status = 'running', attempts = attempts + 1, run_id = ?, started_at = ?"
            " WHERE row_number = ? RETURNING attempts",
            (run_id, _now(), number),
        ).fetchone()
        return int(attempts)

    def record(self, number: int, outcome: RowOutcome) -> bool:
        """Record an attempt's result and status in one transaction; ``False`` if not running."""
        if outcome.status not in ("done", "failed", "not_run"):
            raise ValueError(f"cannot record status {outcome.status!r}")
        output = None if outcome.output is None else json.dumps(outcome.output, ensure_ascii=False, default=str)
        usage = outcome.usage
        spend = (
            (usage.input_tokens, usage.output_tokens, usage.cached_input_tokens, usage.cost_usd, usage.model_calls, usage.tool_calls)
            if usage is not None else (None,) * 6
        )
        # One statement (autocommit): the result and the status land together or not at all.
        updated = self._db.execute(
            "UPDATE rows SET status = ?, output = ?, error = ?, error_kind = ?, retryable = ?,"
            " input_tokens = COALESCE(?, input_tokens), output_tokens = COALESCE(?, output_tokens),"
            " cached_input_tokens = COALESCE(?, cached_input_tokens), cost_usd = COALESCE(?, cost_usd),"
            " model_calls = COALESCE(?, model_calls), tool_calls = COALESCE(?, tool_calls),"
            " duration_seconds = ?, finished_at = ?, warnings = ? WHERE row_number = ? AND status = 'running'",
            (
                outcome.status, output, _clean(outcome.error), outcome.error_kind, int(outcome.retryable),
                *spend, outcome.duration_seconds, _now(), json.dumps(list(outcome.warnings)) if outcome.warnings else None,
                number,
            ),
        ).rowcount
        return updated == 1

    def mark_not_run(self, reason: str, kind: str) -> int:
        """Mark every ``pending`` row ``not_run`` with ``reason``; returns how many."""
        with self._transaction() as db:
            return db.execute(
                "UPDATE rows SET status = 'not_run', error = ?, error_kind = ? WHERE status = 'pending'",
                (_clean(reason), kind),
            ).rowcount

    # --- reads -----------------------------------------------------------------------

    def todo(self, max_attempts: int, *, page_rows: int = 256) -> Iterator[JournalRow]:
        """Rows to run, in input order: pending, or failed-retryable with attempts left.

        Read a page at a time (keyset pagination), so memory stays flat at any size.
        """
        where = "(status = 'pending' OR (status = 'failed' AND retryable = 1 AND attempts < ?))"
        yield from self._pages(where, (max_attempts,), page_rows)

    def records(self, *, page_rows: int = 1000) -> Iterator[JournalRow]:
        """Every row, in input order."""
        yield from self._pages("1 = 1", (), page_rows)

    def counts(self) -> dict[str, int]:
        """Rows by status (every status present, zero if none)."""
        found = dict(self._db.execute("SELECT status, COUNT(*) FROM rows GROUP BY status").fetchall())
        return {status: int(found.get(status, 0)) for status in STATUSES}

    def spent(self) -> Usage:
        """What every row has used so far, over all attempts."""
        tin, tout, cached, cost, calls, tools = self._db.execute(
            "SELECT COALESCE(SUM(input_tokens), 0), COALESCE(SUM(output_tokens), 0), COALESCE(SUM(cached_input_tokens), 0),"
            " COALESCE(SUM(cost_usd), 0), COALESCE(SUM(model_calls), 0), COALESCE(SUM(tool_calls), 0) FROM rows"
        ).fetchone()
        return Usage(int(tin), int(tout), int(cached), float(cost), int(calls), int(tools))

    def row(self, number: int) -> JournalRow | None:
        found = self._db.execute(f"SELECT {_COLUMNS} FROM rows WHERE row_number = ?", (number,)).fetchone()
        return _record(found) if found else None

    # --- internals -------------------------------------------------------------------

    def _pages(self, where: str, params: tuple[Any, ...], page_rows: int) -> Iterator[JournalRow]:
        last = 0
        query = f"SELECT {_COLUMNS} FROM rows WHERE row_number > ? AND {where} ORDER BY row_number LIMIT ?"
        while True:
            page = self._db.execute(query, (last, *params, page_rows)).fetchall()
            for found in page:
                yield _record(found)
            if len(page) < page_rows:
                return
            last = page[-1][0]

    def _insert(self, values: list[tuple[Any, ...]]) -> None:
        if values:
            with self._transaction() as db:
                db.executemany(
                    "INSERT OR IGNORE INTO rows (row_number, id, status, retryable, inputs, error, error_kind,"
                    " created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    values,
                )

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield self._db
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")


def default_journal_path(root: Path, task: str, input_path: Path) -> Path:
    """``<root>/.runner/batches/<task>-<hash of the input path>.sqlite3``: same command, same journal."""
    import hashlib

    key = hashlib.sha256(str(input_path.resolve()).encode()).hexdigest()[:12]
    return root / ".runner" / "batches" / f"{task}-{key}.sqlite3"


# --- helpers ----------------------------------------------------------------------------


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
    db.executescript(_SCHEMA)
    return db


def _check_or_init(db: sqlite3.Connection, path: Path, wanted: dict[str, str]) -> None:
    meta = dict(db.execute("SELECT key, value FROM batch"))
    if not meta:
        fresh = {**wanted, "batch_id": uuid.uuid4().hex[:12], "schema_version": SCHEMA_VERSION, "created_at": _now()}
        db.execute("BEGIN IMMEDIATE")
        db.executemany("INSERT INTO batch VALUES (?, ?)", list(fresh.items()))
        db.execute("COMMIT")
        return
    different = [key for key in ("task", "input_sha256", "options") if meta.get(key) != wanted[key]]
    if meta.get("schema_version") != SCHEMA_VERSION:
        different.append("schema_version")
    if different:
        raise UsageError(
            f"{path}: this journal belongs to another batch ({', '.join(different)} differ): it was started for "
            f"task '{meta.get('task')}' over {meta.get('input_path')} (sha256 {meta.get('input_sha256', '')[:12]}, "
            f"options {meta.get('options')}); this command is task '{wanted['task']}' over {wanted['input_path']} "
            f"(sha256 {wanted['input_sha256'][:12]}, options {wanted['options']}). "
            "Pass --restart to discard it and start over, or --journal PATH to keep both."
        )


def _ingest_values(row: Row, now: str) -> tuple[Any, ...]:
    status = "pending" if row.valid else "invalid"
    inputs = json.dumps(row.inputs, ensure_ascii=False) if row.inputs is not None else None
    kind = None if row.valid else "input"
    return (row.number, _clean(row.id), status, int(row.valid), inputs, _clean(row.error), kind, now)


def _record(found: tuple[Any, ...]) -> JournalRow:
    (number, row_id, status, attempts, retryable, inputs, output, error, kind, run_id, tin, tout, cached, cost,
     calls, tools, took, started, finished, warnings) = found  # fmt: skip
    return JournalRow(
        number=number,
        id=row_id,
        status=status,
        attempts=attempts,
        retryable=bool(retryable),
        inputs=json.loads(inputs) if inputs is not None else None,
        output=json.loads(output) if output is not None else None,
        error=error,
        error_kind=kind,
        run_id=run_id,
        usage=Usage(tin, tout, cached, cost, calls, tools),
        duration_seconds=took,
        started_at=started,
        finished_at=finished,
        warnings=tuple(json.loads(warnings)) if warnings else (),
    )


def _clean(text: str | None) -> str | None:
    """Text SQLite can store: lone surrogates (from invalid UTF-8) become escapes."""
    return None if text is None else text.encode("utf-8", "backslashreplace").decode("utf-8")


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")
