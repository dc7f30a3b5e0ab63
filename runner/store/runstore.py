"""The run store: every run, step, model call, tool call and plan, in SQLite or PostgreSQL.

One connection per store, guarded by a lock (SQLite in WAL mode), so many concurrent runs of
one process (a batch) can record safely; with PostgreSQL (``$RUNNER_STORE_URL``) every worker
shares the record. Completed steps are what a resumed run skips: a run
id seen before resumes where it stopped instead of paying again.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from runner.core.calls import ModelCallEntry, ToolCallEntry
from runner.core.results import RunResult
from runner.core.steps import StepRecord
from runner.core.usage import Usage
from runner.errors import UsageError
from runner.store.abandoned import abandoned, settle_abandoned, this_process
from runner.store.budget_warnings import SCHEMA as BUDGET_WARNINGS
from runner.store.budget_warnings import BudgetWarningLog
from runner.store.connect import open_database
from runner.store.database import Database
from runner.store.result_cache import ResultStore
from runner.store.schema import AddedColumn, Schema
from runner.store.store_kind import complete, refuse_foreign
from runner.store.store_version import STORE_VERSION, found_version, refuse_newer, stamp
from runner.store.transcripts import SCHEMA as TRANSCRIPT_SCHEMA
from runner.store.transcripts import TranscriptStore

SCHEMA = Schema(
    """
CREATE TABLE IF NOT EXISTS runs (
  run_id TEXT PRIMARY KEY,
  task TEXT NOT NULL,
  status TEXT NOT NULL,
  started_at TEXT NOT NULL,
  finished_at TEXT,
  attempts {int} NOT NULL DEFAULT 1,
  inputs_json TEXT NOT NULL,
  config_hash TEXT NOT NULL,
  caps_json TEXT NOT NULL,
  cost_usd {real} NOT NULL DEFAULT 0,
  input_tokens {bigint} NOT NULL DEFAULT 0,
  output_tokens {bigint} NOT NULL DEFAULT 0,
  cached_input_tokens {bigint} NOT NULL DEFAULT 0,
  reasoning_tokens {bigint} NOT NULL DEFAULT 0,
  cache_write_tokens {bigint} NOT NULL DEFAULT 0,
  model_calls {int} NOT NULL DEFAULT 0,
  tool_calls {int} NOT NULL DEFAULT 0,
  error TEXT,
  error_kind TEXT,
  output_json TEXT,
  record_json TEXT,
  report_dir TEXT,
  attempt_token TEXT,
  holder_host TEXT,
  holder_pid {bigint},
  holder_started TEXT
);
CREATE INDEX IF NOT EXISTS runs_by_task ON runs (task, finished_at);
CREATE TABLE IF NOT EXISTS steps (
  run_id TEXT NOT NULL,
  step_id TEXT NOT NULL,
  kind TEXT NOT NULL,
  agent TEXT,
  tool TEXT,
  status TEXT NOT NULL,
  error TEXT,
  error_kind TEXT,
  started_at TEXT NOT NULL,
  finished_at TEXT,
  duration_seconds {real},
  cost_usd {real} NOT NULL DEFAULT 0,
  input_tokens {bigint} NOT NULL DEFAULT 0,
  output_tokens {bigint} NOT NULL DEFAULT 0,
  cached_input_tokens {bigint} NOT NULL DEFAULT 0,
  reasoning_tokens {bigint} NOT NULL DEFAULT 0,
  cache_write_tokens {bigint} NOT NULL DEFAULT 0,
  model_calls {int} NOT NULL DEFAULT 0,
  tool_calls {int} NOT NULL DEFAULT 0,
  model TEXT,
  record_json TEXT NOT NULL,
  PRIMARY KEY (run_id, step_id)
);
CREATE TABLE IF NOT EXISTS model_calls (
  id {id},
  run_id TEXT NOT NULL,
  attempt {int} NOT NULL,
  step_id TEXT NOT NULL,
  agent TEXT NOT NULL,
  model TEXT NOT NULL,
  seq {int} NOT NULL,
  input_tokens {bigint} NOT NULL,
  output_tokens {bigint} NOT NULL,
  cached_input_tokens {bigint} NOT NULL,
  reasoning_tokens {bigint} NOT NULL DEFAULT 0,
  cache_write_tokens {bigint} NOT NULL DEFAULT 0,
  cost_usd {real} NOT NULL,
  latency_seconds {real} NOT NULL,
  status TEXT NOT NULL,
  error TEXT,
  created_at TEXT NOT NULL,
  cached {int} NOT NULL DEFAULT 0,
  token TEXT,
  reservation TEXT,
  tariff TEXT
);
CREATE INDEX IF NOT EXISTS model_calls_by_run ON model_calls (run_id);
CREATE TABLE IF NOT EXISTS tool_calls (
  id {id},
  run_id TEXT NOT NULL,
  attempt {int} NOT NULL,
  step_id TEXT NOT NULL,
  agent TEXT NOT NULL,
  seq {int} NOT NULL,
  name TEXT NOT NULL,
  arguments TEXT NOT NULL,
  status TEXT NOT NULL,
  duration_seconds {real} NOT NULL,
  output_excerpt TEXT NOT NULL,
  artifacts_json TEXT NOT NULL,
  created_at TEXT NOT NULL,
  cached {int} NOT NULL DEFAULT 0,
  token TEXT
);
CREATE INDEX IF NOT EXISTS tool_calls_by_run ON tool_calls (run_id);
CREATE TABLE IF NOT EXISTS plans (
  id {id},
  run_id TEXT NOT NULL,
  attempt {int} NOT NULL,
  reason TEXT,
  plan_json TEXT NOT NULL,
  created_at TEXT NOT NULL,
  token TEXT
)
""",
    added=(  # columns added after a store was first created
        AddedColumn("runs", "cached_input_tokens", "{bigint} NOT NULL DEFAULT 0"),
        AddedColumn("steps", "cached_input_tokens", "{bigint} NOT NULL DEFAULT 0"),
        AddedColumn("model_calls", "cached", "{int} NOT NULL DEFAULT 0"),  # answered from the result cache
        *(AddedColumn(table, column, "{bigint} NOT NULL DEFAULT 0")  # usage details: reasoning (output), cache writes (input)
          for table in ("runs", "steps", "model_calls") for column in ("reasoning_tokens", "cache_write_tokens")),
        AddedColumn("tool_calls", "cached", "{int} NOT NULL DEFAULT 0"),
        # write tokens: a write repeated after a lost connection finds its first try by them
        AddedColumn("runs", "attempt_token", "TEXT"),
        AddedColumn("model_calls", "token", "TEXT"),
        AddedColumn("tool_calls", "token", "TEXT"),
        AddedColumn("plans", "token", "TEXT"),
        AddedColumn("model_calls", "reservation", "TEXT"),  # the cap ledger entry the call held
        AddedColumn("model_calls", "tariff", "TEXT"),  # live, or batch: reserved for a provider batch (NULL: recorded before)
        # the process running the attempt: a run it left 'running' when it died is settled (runner.store.abandoned)
        AddedColumn("runs", "holder_host", "TEXT"),
        AddedColumn("runs", "holder_pid", "{bigint}"),
        AddedColumn("runs", "holder_started", "TEXT"),
    ),
)
"""The run store's tables, for both backends (:mod:`runner.store.schema`). ``steps.record_json``
is the whole step record (output, data, tool calls, artifacts); the other columns are for queries."""


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def dumps(value: Any) -> str:
    return json.dumps(value, default=str, ensure_ascii=False)


def new_token() -> str:
    """A write's token: a retry after a lost connection looks for it to tell whether the first try committed."""
    return uuid.uuid4().hex


def _written(db: Database, table: str, run_id: str, token: str) -> int | None:
    """The id of ``table``'s row of ``run_id`` written with ``token``, if that write committed."""
    row = db.row(f"SELECT id FROM {table} WHERE run_id = ? AND token = ?", (run_id, token))
    return int(row["id"]) if row else None


class RunStore:
    """The record of runs, in an SQLite file or a PostgreSQL database. Thread-safe.

    ``target`` is a path (SQLite) or a ``postgresql://`` URL (see :mod:`runner.store.database`);
    every worker naming the same URL shares the runs, so a retry on another machine resumes.
    """

    def __init__(self, target: Path | str, *, read_only: bool = False):
        """``read_only``: for a command that only reads; the store is opened so that nothing in
        it changes (SQLite ``mode=ro``, PostgreSQL read-only transactions), unless it is
        runner's store from an earlier runner, which is brought up to date first. Any other
        application's database is refused before anything is written to it
        (:mod:`runner.store.store_kind`)."""
        self.path = target if isinstance(target, Path) else str(target)
        self._result_cache: ResultStore | None = None
        readable = self._open_read_only(target) if read_only else None
        if readable is not None:
            self._db: Database = readable
            self.where = readable.where
            self.transcripts = TranscriptStore(readable, now=now_iso, create=False)
            self.budget_warnings = BudgetWarningLog(readable, now=now_iso, create=False)
            return
        if isinstance(target, Path) and target.is_file():  # looked at read-only first: a foreign file stays as it is
            probe = open_database(target, read_only=True)
            try:
                refuse_foreign(probe)
            finally:
                probe.close()
        self._db = open_database(target)
        self.where = self._db.where
        refuse_newer(self._db)
        refuse_foreign(self._db)
        self._db.create(SCHEMA)
        stamp(self._db)
        settle_abandoned(self._db, now_iso())  # runs a dead process left 'running' say so, not 'running' for ever
        self.transcripts = TranscriptStore(self._db, now=now_iso)  # full requests, responses and tool outputs
        self.budget_warnings = BudgetWarningLog(self._db, now=now_iso)  # warn_at crossings the runs met

    @staticmethod
    def _open_read_only(target: Path | str) -> Database | None:
        """The store opened read-only; ``None`` when it is runner's but from an earlier runner,
        still empty, or holds runs a dead process left ``running`` (the writable open brings it
        up to date and records those as interrupted: runner's own store, checked first)."""
        db = open_database(target, read_only=True)
        try:
            refuse_newer(db)
            current = refuse_foreign(db) and found_version(db) >= STORE_VERSION and complete(db, (SCHEMA, TRANSCRIPT_SCHEMA, BUDGET_WARNINGS))
            if current and not abandoned(db):
                return db
        except BaseException:
            db.close()
            raise
        db.close()
        return None

    @property
    def database(self) -> Database:
        """The connection, for what else lives in the same database (the shared cap ledger)."""
        return self._db

    @property
    def result_cache(self) -> ResultStore:
        """The result cache's table, in the same database (created on first use)."""
        if self._result_cache is None:
            self._result_cache = ResultStore(self._db)
        return self._result_cache

    def close(self) -> None:
        self._db.close()

    # -- runs -----------------------------------------------------------------------

    def start_run(self, run_id: str, task: str, inputs: dict[str, Any], config_hash: str, caps: dict[str, Any]) -> int:
        """Record a run's start; return the attempt number (2+ when resuming).

        A run id seen before must belong to the same task and inputs: resuming another
        run's record would return its results for different inputs. One transaction, so two
        workers starting the same run id at once get attempts 1 and 2, never both 1. The
        attempt's token tells a retry after a lost connection whether the first try committed.
        """
        token = new_token()
        holder = this_process()

        def start(db: Database) -> int:
            inserted = db.execute(
                "INSERT INTO runs (run_id, task, status, started_at, inputs_json, config_hash, caps_json, attempt_token,"
                " holder_host, holder_pid, holder_started) VALUES (?, ?, 'running', ?, ?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (run_id) DO NOTHING",
                (run_id, task, now_iso(), dumps(inputs), config_hash, dumps(caps), token, *holder),
            )
            if inserted:
                return 1
            row = db.row("SELECT task, inputs_json FROM runs WHERE run_id = ?", (run_id,))
            assert row is not None  # it conflicted, and runs are never deleted
            if row["task"] != task or json.loads(row["inputs_json"]) != json.loads(dumps(inputs)):
                raise UsageError(
                    f"run id {run_id!r} belongs to a run of task '{row['task']}' with inputs {row['inputs_json']}; "
                    "a resumed run must have the same task and inputs (use another --run-id)"
                )
            updated = db.row(
                "UPDATE runs SET attempts = attempts + 1, status = 'running', finished_at = NULL, error = NULL,"
                " error_kind = NULL, attempt_token = ?, holder_host = ?, holder_pid = ?, holder_started = ?"
                " WHERE run_id = ? RETURNING attempts",
                (token, *holder, run_id),
            )
            assert updated is not None
            return int(updated["attempts"])

        def started(db: Database) -> int | None:
            row = db.row("SELECT attempts FROM runs WHERE run_id = ? AND attempt_token = ?", (run_id, token))
            return int(row["attempts"]) if row else None

        return self._db.atomic(start, check=started)

    def unsettled_calls(self, run_id: str) -> Usage:
        """Mark the calls an earlier attempt left ``reserved`` (it died with them in flight) as
        ``unsettled``; they keep counting at their worst case. Returns what they add up to
        (the same when repeated: it is safe to apply twice)."""

        def mark(db: Database) -> dict[str, Any] | None:
            db.execute("UPDATE model_calls SET status = 'unsettled' WHERE run_id = ? AND status = 'reserved'", (run_id,))
            return db.row(
                "SELECT COALESCE(SUM(input_tokens), 0) AS i, COALESCE(SUM(output_tokens), 0) AS o,"
                " COALESCE(SUM(cost_usd), 0) AS c, COUNT(*) AS n"
                " FROM model_calls WHERE run_id = ? AND status = 'unsettled'",
                (run_id,),
            )

        row = self._db.atomic(mark)
        assert row is not None
        return Usage(int(row["i"]), int(row["o"]), 0, float(row["c"]), int(row["n"]))

    def recorded_calls(self, run_id: str) -> dict[str, Usage | None]:
        """How the calls of ``run_id`` that ended are recorded (:func:`recorded_calls`)."""
        return recorded_calls(self._db, run_id)

    def run(self, run_id: str) -> dict[str, Any] | None:
        return self._db.row("SELECT * FROM runs WHERE run_id = ?", (run_id,))

    def find_runs(self, prefix: str) -> list[str]:
        rows = self._db.rows("SELECT run_id FROM runs WHERE run_id LIKE ? LIMIT 5", (prefix + "%",))
        return [r["run_id"] for r in rows]

    def finish_run(self, result: RunResult, record: dict[str, Any]) -> None:
        """Record how a run ended: its status, usage, output and report record."""
        usage = result.usage
        self._update_run(result.run_id, {
            "status": result.status, "error": result.error, "error_kind": result.error_kind,
            "cost_usd": usage.cost_usd, "input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens,
            "cached_input_tokens": usage.cached_input_tokens, "model_calls": usage.model_calls,
            "reasoning_tokens": usage.reasoning_tokens, "cache_write_tokens": usage.cache_write_tokens,
            "tool_calls": usage.tool_calls, "output_json": dumps(result.output), "record_json": dumps(record),
            "report_dir": str(result.report_dir) if result.report_dir else None,
        })

    def abort_run(self, run_id: str, error: str) -> None:
        """Record that a run stopped on an exception (it is re-raised to the caller)."""
        self._update_run(run_id, {"status": "failed", "error": error})

    def _update_run(self, run_id: str, fields: dict[str, Any]) -> None:
        columns = ", ".join(f"{k} = ?" for k in fields)  # one statement: its own transaction
        self._db.execute(
            f"UPDATE runs SET {columns}, finished_at = ? WHERE run_id = ?", (*fields.values(), now_iso(), run_id),
            idempotent=True,
        )

    def list_runs(self, task: str | None = None, limit: int = 20) -> list[dict[str, Any]]:
        query = "SELECT * FROM runs" + (" WHERE task = ?" if task else "") + " ORDER BY started_at DESC LIMIT ?"
        params: tuple[Any, ...] = (task, limit) if task else (limit,)
        return self._db.rows(query, params)

    def previous_completed(self, task: str, before_run: str, inputs: dict[str, Any]) -> dict[str, Any] | None:
        """The latest completed run of ``task`` with other inputs (memory across runs: a
        re-run of the same day is not its own "previous")."""
        return self._db.row(
            "SELECT * FROM runs WHERE task = ? AND status = 'completed' AND run_id != ? AND inputs_json != ?"
            " ORDER BY finished_at DESC LIMIT 1",
            (task, before_run, dumps(inputs)),
        )

    def spent(self, run_id: str) -> Usage:
        """What every attempt of a run has used so far (caps carry over): settled calls as
        reported, calls a crash left unsettled at their worst case, failed attempts that may
        have been billed at their worst case."""

        def read(db: Database) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:  # one snapshot of both tables
            calls = db.row(
                "SELECT COALESCE(SUM(cost_usd), 0) AS c, COALESCE(SUM(input_tokens), 0) AS i,"
                " COALESCE(SUM(output_tokens), 0) AS o, COALESCE(SUM(cached_input_tokens), 0) AS k,"
                " COALESCE(SUM(reasoning_tokens), 0) AS r, COALESCE(SUM(cache_write_tokens), 0) AS w,"
                " COALESCE(SUM(CASE WHEN status != 'error' OR input_tokens + output_tokens > 0 THEN 1 ELSE 0 END), 0) AS n"
                " FROM model_calls WHERE run_id = ?",
                (run_id,),
            )
            return calls, db.row("SELECT COUNT(*) AS n FROM tool_calls WHERE run_id = ?", (run_id,))

        row, tools = self._db.atomic(read)
        assert row is not None and tools is not None
        return Usage(
            int(row["i"]), int(row["o"]), int(row["k"]), float(row["c"]), int(row["n"]), int(tools["n"]), int(row["r"]), int(row["w"]),
        )

    # -- steps ----------------------------------------------------------------------

    def completed_steps(self, run_id: str) -> dict[str, StepRecord]:
        rows = self._db.rows("SELECT step_id, record_json FROM steps WHERE run_id = ? AND status = 'completed'", (run_id,))
        return {r["step_id"]: StepRecord.from_dict(json.loads(r["record_json"])) for r in rows}

    def steps(self, run_id: str) -> list[dict[str, Any]]:
        rows = self._db.rows("SELECT * FROM steps WHERE run_id = ? ORDER BY started_at", (run_id,))
        return [r | json.loads(r["record_json"]) for r in rows]

    def save_step(self, run_id: str, step: StepRecord) -> None:
        """Insert or replace one step's record; the columns are for queries, the record is the truth."""
        usage = step.usage
        row = {
            "run_id": run_id, "step_id": step.id, "kind": step.kind, "agent": step.agent, "tool": step.tool,
            "status": step.status, "error": step.error, "error_kind": step.error_kind, "started_at": step.started_at,
            "finished_at": step.finished_at, "duration_seconds": step.duration_seconds, "cost_usd": usage.cost_usd,
            "input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens,
            "cached_input_tokens": usage.cached_input_tokens, "model_calls": usage.model_calls,
            "reasoning_tokens": usage.reasoning_tokens, "cache_write_tokens": usage.cache_write_tokens,
            "tool_calls": len(step.tool_calls), "model": step.model, "record_json": dumps(step.as_dict()),
        }
        columns = ", ".join(row)
        marks = ", ".join("?" for _ in row)
        replace_all = ", ".join(f"{c} = excluded.{c}" for c in row if c not in ("run_id", "step_id"))
        self._db.execute(
            f"INSERT INTO steps ({columns}) VALUES ({marks}) ON CONFLICT (run_id, step_id) DO UPDATE SET {replace_all}",
            tuple(row.values()), idempotent=True,
        )

    # -- calls and plans ------------------------------------------------------------

    def add_model_call(self, run_id: str, attempt: int, call: ModelCallEntry) -> int:
        """Insert one model call (``reserved`` ones before they are sent); returns its id. Once:
        a retry after a lost connection finds a committed first try by its token."""
        usage = call.usage
        token = new_token()
        values = (
            run_id, attempt, call.step_id, call.agent, call.model, call.seq, usage.input_tokens, usage.output_tokens,
            usage.cached_input_tokens, usage.cost_usd, call.latency_seconds, call.status, call.error, now_iso(),
            int(call.cached), token, call.reservation, call.tariff,
        )  # fmt: skip

        def insert(db: Database) -> int:
            inserted = db.row(
                "INSERT INTO model_calls (run_id, attempt, step_id, agent, model, seq, input_tokens, output_tokens,"
                " cached_input_tokens, cost_usd, latency_seconds, status, error, created_at, cached, token, reservation, tariff)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
                values,
            )
            assert inserted is not None
            return int(inserted["id"])

        return self._db.checked(insert, check=lambda db: _written(db, "model_calls", run_id, token))

    def settle_model_call(self, call_id: int, call: ModelCallEntry) -> None:
        """Replace a reserved call's worst case by how it ended."""
        usage = call.usage
        self._db.execute(
            "UPDATE model_calls SET input_tokens = ?, output_tokens = ?, cached_input_tokens = ?, cost_usd = ?,"
            " reasoning_tokens = ?, cache_write_tokens = ?, latency_seconds = ?, status = ?, error = ? WHERE id = ?",
            (
                usage.input_tokens, usage.output_tokens, usage.cached_input_tokens, usage.cost_usd,
                usage.reasoning_tokens, usage.cache_write_tokens,
                call.latency_seconds, call.status, call.error, call_id,
            ),
            idempotent=True,
        )

    def release_unsent(self, call_id: int, error: str) -> bool:
        """Settle at nothing a call an earlier process reserved and left in flight (``reserved`` or
        ``unsettled``) that is known never to have been sent; a call settled since is left alone.
        Whether it was released."""
        released = self._db.execute(
            "UPDATE model_calls SET input_tokens = 0, output_tokens = 0, cached_input_tokens = 0, cost_usd = 0,"
            " reasoning_tokens = 0, cache_write_tokens = 0, status = 'error', error = ?"
            " WHERE id = ? AND status IN ('reserved', 'unsettled')",
            (error, call_id), idempotent=True,
        )  # fmt: skip
        return released > 0

    def add_tool_call(self, run_id: str, attempt: int, call: ToolCallEntry) -> None:
        """Insert one tool call, once (see :meth:`add_model_call`)."""
        token = new_token()
        values = (
            run_id, attempt, call.step_id, call.agent, call.seq, call.name, call.arguments, call.status,
            call.duration_seconds, call.output_excerpt, dumps(list(call.artifacts)), now_iso(), int(call.cached), token,
        )  # fmt: skip
        self._insert_once(
            "INSERT INTO tool_calls (run_id, attempt, step_id, agent, seq, name, arguments, status, duration_seconds,"
            " output_excerpt, artifacts_json, created_at, cached, token) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            values, "tool_calls", run_id, token,
        )  # fmt: skip

    def add_plan(self, run_id: str, attempt: int, plan: dict[str, Any], reason: str | None) -> None:
        """Insert one plan, once (see :meth:`add_model_call`)."""
        token = new_token()
        self._insert_once(
            "INSERT INTO plans (run_id, attempt, reason, plan_json, created_at, token) VALUES (?, ?, ?, ?, ?, ?)",
            (run_id, attempt, reason, dumps(plan), now_iso(), token), "plans", run_id, token,
        )  # fmt: skip

    def _insert_once(self, sql: str, values: tuple[Any, ...], table: str, run_id: str, token: str) -> None:
        self._db.checked(lambda db: db.execute(sql, values), check=lambda db: _written(db, table, run_id, token))

    def model_calls(self, run_id: str) -> list[dict[str, Any]]:
        return self._db.rows("SELECT * FROM model_calls WHERE run_id = ? ORDER BY id", (run_id,))

    def tool_calls(self, run_id: str) -> list[dict[str, Any]]:
        return self._db.rows("SELECT * FROM tool_calls WHERE run_id = ? ORDER BY id", (run_id,))

    # -- queries across runs (runner stats) -------------------------------------------
    # Plain SELECTs with ISO-8601 UTC timestamps compared as text: portable to any SQL store.

    _WINDOW = "r.started_at >= ? AND r.started_at < ?"

    def runs_between(self, since: str, until: str, task: str | None = None) -> list[dict[str, Any]]:
        """Runs started in ``[since, until)`` (ISO-8601 UTC), oldest first, without their records."""
        return self._window(
            "SELECT r.run_id, r.task, r.status, r.started_at, r.finished_at, r.attempts, r.cost_usd, r.input_tokens,"
            " r.output_tokens, r.cached_input_tokens, r.reasoning_tokens, r.cache_write_tokens, r.model_calls, r.tool_calls, r.error_kind FROM runs r",
            since, until, task, order="r.started_at",
        )

    def steps_between(self, since: str, until: str, task: str | None = None) -> list[dict[str, Any]]:
        """The steps of the runs started in ``[since, until)``, with their run's task."""
        return self._window(
            "SELECT s.run_id, r.task, s.step_id, s.kind, s.agent, s.tool, s.model, s.status, s.error_kind,"
            " s.duration_seconds, s.cost_usd, s.input_tokens, s.output_tokens, s.reasoning_tokens, s.cache_write_tokens,"
            " s.model_calls, s.tool_calls"
            " FROM steps s JOIN runs r ON r.run_id = s.run_id",
            since, until, task, order="s.started_at",
        )

    def model_calls_between(self, since: str, until: str, task: str | None = None) -> list[dict[str, Any]]:
        """The model calls of the runs started in ``[since, until)``, with their run's task."""
        return self._window(
            "SELECT m.run_id, r.task, m.agent, m.model, m.status, m.input_tokens, m.output_tokens, m.reasoning_tokens,"
            " m.cache_write_tokens, m.cost_usd, m.latency_seconds FROM model_calls m JOIN runs r ON r.run_id = m.run_id",
            since, until, task, order="m.id",
        )

    def tool_calls_between(self, since: str, until: str, task: str | None = None) -> list[dict[str, Any]]:
        """The tool calls of the runs started in ``[since, until)``, with their run's task."""
        return self._window(
            "SELECT t.run_id, r.task, t.agent, t.name, t.status, t.duration_seconds FROM tool_calls t"
            " JOIN runs r ON r.run_id = t.run_id",
            since, until, task, order="t.id",
        )

    def _window(self, select: str, since: str, until: str, task: str | None, *, order: str) -> list[dict[str, Any]]:
        query = f"{select} WHERE {self._WINDOW}" + (" AND r.task = ?" if task else "") + f" ORDER BY {order}"
        params: tuple[Any, ...] = (since, until, task) if task else (since, until)
        return self._db.rows(query, params)


def recorded_calls(db: Database, run_id: str) -> dict[str, Usage | None]:
    """How the calls of ``run_id`` that ended are recorded in the run store ``db``, by the
    reservation each held: what it used (``ok``, or a failure the endpoint may have billed, at
    its worst case), or ``None`` (a failure it did not bill). Calls still ``reserved`` or
    ``unsettled`` are not here. It only reads (a store from before reservations were recorded has none)."""
    if "reservation" not in db.columns("model_calls"):
        return {}
    rows = db.rows(
        "SELECT reservation, status, input_tokens, output_tokens, cached_input_tokens, cost_usd FROM model_calls"
        " WHERE run_id = ? AND reservation IS NOT NULL AND status IN ('ok', 'error')",
        (run_id,),
    )
    recorded: dict[str, Usage | None] = {}
    for row in rows:
        usage = Usage(int(row["input_tokens"]), int(row["output_tokens"]), int(row["cached_input_tokens"]), float(row["cost_usd"]))
        recorded[str(row["reservation"])] = None if row["status"] == "error" and usage == Usage() else usage
    return recorded
