"""The run store: every run, step, model call, tool call and plan, in SQLite.

One connection per store, guarded by a lock, in WAL mode, so many concurrent runs of one
process (a batch) can record safely. Completed steps are what a resumed run skips: a run
id seen before resumes where it stopped instead of paying again.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from runner.core.calls import ModelCallEntry, ToolCallEntry
from runner.core.results import RunResult
from runner.core.steps import StepRecord
from runner.core.usage import Usage
from runner.errors import UsageError

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
  run_id TEXT PRIMARY KEY,
  task TEXT NOT NULL,
  status TEXT NOT NULL,
  started_at TEXT NOT NULL,
  finished_at TEXT,
  attempts INTEGER NOT NULL DEFAULT 1,
  inputs_json TEXT NOT NULL,
  config_hash TEXT NOT NULL,
  caps_json TEXT NOT NULL,
  cost_usd REAL NOT NULL DEFAULT 0,
  input_tokens INTEGER NOT NULL DEFAULT 0,
  output_tokens INTEGER NOT NULL DEFAULT 0,
  cached_input_tokens INTEGER NOT NULL DEFAULT 0,
  model_calls INTEGER NOT NULL DEFAULT 0,
  tool_calls INTEGER NOT NULL DEFAULT 0,
  error TEXT,
  error_kind TEXT,
  output_json TEXT,
  record_json TEXT,
  report_dir TEXT
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
  duration_seconds REAL,
  cost_usd REAL NOT NULL DEFAULT 0,
  input_tokens INTEGER NOT NULL DEFAULT 0,
  output_tokens INTEGER NOT NULL DEFAULT 0,
  cached_input_tokens INTEGER NOT NULL DEFAULT 0,
  model_calls INTEGER NOT NULL DEFAULT 0,
  tool_calls INTEGER NOT NULL DEFAULT 0,
  model TEXT,
  record_json TEXT NOT NULL,  -- the whole step record (output, data, tool calls, artifacts)
  PRIMARY KEY (run_id, step_id)
);
CREATE TABLE IF NOT EXISTS model_calls (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  run_id TEXT NOT NULL,
  attempt INTEGER NOT NULL,
  step_id TEXT NOT NULL,
  agent TEXT NOT NULL,
  model TEXT NOT NULL,
  seq INTEGER NOT NULL,
  input_tokens INTEGER NOT NULL,
  output_tokens INTEGER NOT NULL,
  cached_input_tokens INTEGER NOT NULL,
  cost_usd REAL NOT NULL,
  latency_seconds REAL NOT NULL,
  status TEXT NOT NULL,
  error TEXT,
  created_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS model_calls_by_run ON model_calls (run_id);
CREATE TABLE IF NOT EXISTS tool_calls (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  run_id TEXT NOT NULL,
  attempt INTEGER NOT NULL,
  step_id TEXT NOT NULL,
  agent TEXT NOT NULL,
  seq INTEGER NOT NULL,
  name TEXT NOT NULL,
  arguments TEXT NOT NULL,
  status TEXT NOT NULL,
  duration_seconds REAL NOT NULL,
  output_excerpt TEXT NOT NULL,
  artifacts_json TEXT NOT NULL,
  created_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS tool_calls_by_run ON tool_calls (run_id);
CREATE TABLE IF NOT EXISTS plans (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  run_id TEXT NOT NULL,
  attempt INTEGER NOT NULL,
  reason TEXT,
  plan_json TEXT NOT NULL,
  created_at TEXT NOT NULL
);
"""
MIGRATIONS = (  # columns added after a store was first created: (table, column, definition)
    ("runs", "cached_input_tokens", "INTEGER NOT NULL DEFAULT 0"),
    ("steps", "cached_input_tokens", "INTEGER NOT NULL DEFAULT 0"),
)


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def dumps(value: Any) -> str:
    return json.dumps(value, default=str, ensure_ascii=False)


class RunStore:
    """SQLite-backed record of runs. Thread-safe; one instance per database file."""

    def __init__(self, path: Path):
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=30)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("PRAGMA busy_timeout=30000")
        self._db.executescript(SCHEMA)
        self._migrate()

    def _migrate(self) -> None:
        for table, column, definition in MIGRATIONS:
            present = {row["name"] for row in self._db.execute(f"PRAGMA table_info({table})")}
            if column not in present:
                self._db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {definition}")

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # -- runs -----------------------------------------------------------------------

    def start_run(self, run_id: str, task: str, inputs: dict[str, Any], config_hash: str, caps: dict[str, Any]) -> int:
        """Record a run's start; return the attempt number (2+ when resuming).

        A run id seen before must belong to the same task and inputs: resuming another
        run's record would return its results for different inputs.
        """
        with self._lock:
            row = self._db.execute("SELECT attempts, task, inputs_json FROM runs WHERE run_id = ?", (run_id,)).fetchone()
            if row is None:
                self._db.execute(
                    "INSERT INTO runs (run_id, task, status, started_at, inputs_json, config_hash, caps_json)"
                    " VALUES (?, ?, 'running', ?, ?, ?, ?)",
                    (run_id, task, now_iso(), dumps(inputs), config_hash, dumps(caps)),
                )
                return 1
            if row["task"] != task or json.loads(row["inputs_json"]) != json.loads(dumps(inputs)):
                raise UsageError(
                    f"run id {run_id!r} belongs to a run of task '{row['task']}' with inputs {row['inputs_json']}; "
                    "a resumed run must have the same task and inputs (use another --run-id)"
                )
            attempt = int(row["attempts"]) + 1
            self._db.execute(
                "UPDATE runs SET attempts = ?, status = 'running', finished_at = NULL, error = NULL WHERE run_id = ?",
                (attempt, run_id),
            )
            return attempt

    def unsettled_calls(self, run_id: str) -> Usage:
        """Mark the calls an earlier attempt left ``reserved`` (it died with them in flight) as
        ``unsettled``; they keep counting at their worst case. Returns what they add up to."""
        with self._lock:
            self._db.execute("UPDATE model_calls SET status = 'unsettled' WHERE run_id = ? AND status = 'reserved'", (run_id,))
            row = self._db.execute(
                "SELECT COALESCE(SUM(input_tokens),0), COALESCE(SUM(output_tokens),0), COALESCE(SUM(cost_usd),0), COUNT(*)"
                " FROM model_calls WHERE run_id = ? AND status = 'unsettled'",
                (run_id,),
            ).fetchone()
        return Usage(int(row[0]), int(row[1]), 0, float(row[2]), int(row[3]))

    def run(self, run_id: str) -> dict[str, Any] | None:
        with self._lock:
            row = self._db.execute("SELECT * FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        return dict(row) if row else None

    def find_runs(self, prefix: str) -> list[str]:
        with self._lock:
            rows = self._db.execute("SELECT run_id FROM runs WHERE run_id LIKE ? LIMIT 5", (prefix + "%",)).fetchall()
        return [r["run_id"] for r in rows]

    def finish_run(self, result: RunResult, record: dict[str, Any]) -> None:
        """Record how a run ended: its status, usage, output and report record."""
        usage = result.usage
        self._update_run(result.run_id, {
            "status": result.status, "error": result.error, "error_kind": result.error_kind,
            "cost_usd": usage.cost_usd, "input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens,
            "cached_input_tokens": usage.cached_input_tokens, "model_calls": usage.model_calls,
            "tool_calls": usage.tool_calls, "output_json": dumps(result.output), "record_json": dumps(record),
            "report_dir": str(result.report_dir) if result.report_dir else None,
        })

    def abort_run(self, run_id: str, error: str) -> None:
        """Record that a run stopped on an exception (it is re-raised to the caller)."""
        self._update_run(run_id, {"status": "failed", "error": error})

    def _update_run(self, run_id: str, fields: dict[str, Any]) -> None:
        columns = ", ".join(f"{k} = ?" for k in fields)
        with self._lock:  # one statement: its own transaction
            self._db.execute(f"UPDATE runs SET {columns}, finished_at = ? WHERE run_id = ?", (*fields.values(), now_iso(), run_id))

    def list_runs(self, task: str | None = None, limit: int = 20) -> list[dict[str, Any]]:
        query = "SELECT * FROM runs" + (" WHERE task = ?" if task else "") + " ORDER BY started_at DESC LIMIT ?"
        params: tuple[Any, ...] = (task, limit) if task else (limit,)
        with self._lock:
            return [dict(r) for r in self._db.execute(query, params).fetchall()]

    def previous_completed(self, task: str, before_run: str, inputs: dict[str, Any]) -> dict[str, Any] | None:
        """The latest completed run of ``task`` with other inputs (memory across runs: a
        re-run of the same day is not its own "previous")."""
        with self._lock:
            row = self._db.execute(
                "SELECT * FROM runs WHERE task = ? AND status = 'completed' AND run_id != ? AND inputs_json != ?"
                " ORDER BY finished_at DESC LIMIT 1",
                (task, before_run, dumps(inputs)),
            ).fetchone()
        return dict(row) if row else None

    def spent(self, run_id: str) -> Usage:
        """What every attempt of a run has used so far (caps carry over): settled calls as
        reported, calls a crash left unsettled at their worst case, failed attempts that may
        have been billed at their worst case."""
        with self._lock:
            row = self._db.execute(
                "SELECT COALESCE(SUM(cost_usd),0) c, COALESCE(SUM(input_tokens),0) i, COALESCE(SUM(output_tokens),0) o,"
                " COALESCE(SUM(cached_input_tokens),0) k,"
                " COALESCE(SUM(status != 'error' OR input_tokens + output_tokens > 0), 0) n"
                " FROM model_calls WHERE run_id = ?",
                (run_id,),
            ).fetchone()
            (tools,) = self._db.execute("SELECT COUNT(*) FROM tool_calls WHERE run_id = ?", (run_id,)).fetchone()
        return Usage(int(row["i"]), int(row["o"]), int(row["k"]), float(row["c"]), int(row["n"]), int(tools))

    # -- steps ----------------------------------------------------------------------

    def completed_steps(self, run_id: str) -> dict[str, StepRecord]:
        with self._lock:
            rows = self._db.execute(
                "SELECT step_id, record_json FROM steps WHERE run_id = ? AND status = 'completed'", (run_id,)
            ).fetchall()
        return {r["step_id"]: StepRecord.from_dict(json.loads(r["record_json"])) for r in rows}

    def steps(self, run_id: str) -> list[dict[str, Any]]:
        with self._lock:
            rows = self._db.execute("SELECT * FROM steps WHERE run_id = ? ORDER BY started_at", (run_id,)).fetchall()
        return [dict(r) | json.loads(r["record_json"]) for r in rows]

    def save_step(self, run_id: str, step: StepRecord) -> None:
        """Insert or replace one step's record; the columns are for queries, the record is the truth."""
        usage = step.usage
        row = {
            "run_id": run_id, "step_id": step.id, "kind": step.kind, "agent": step.agent, "tool": step.tool,
            "status": step.status, "error": step.error, "error_kind": step.error_kind, "started_at": step.started_at,
            "finished_at": step.finished_at, "duration_seconds": step.duration_seconds, "cost_usd": usage.cost_usd,
            "input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens,
            "cached_input_tokens": usage.cached_input_tokens, "model_calls": usage.model_calls,
            "tool_calls": len(step.tool_calls), "model": step.model, "record_json": dumps(step.as_dict()),
        }
        columns = ", ".join(row)
        marks = ", ".join("?" for _ in row)
        with self._lock:
            self._db.execute(f"INSERT OR REPLACE INTO steps ({columns}) VALUES ({marks})", tuple(row.values()))

    # -- calls and plans ------------------------------------------------------------

    def add_model_call(self, run_id: str, attempt: int, call: ModelCallEntry) -> int:
        """Insert one model call (``reserved`` ones before they are sent); returns its id."""
        usage = call.usage
        with self._lock:  # one statement: autocommit is its own transaction
            cursor = self._db.execute(
                "INSERT INTO model_calls (run_id, attempt, step_id, agent, model, seq, input_tokens, output_tokens,"
                " cached_input_tokens, cost_usd, latency_seconds, status, error, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    run_id, attempt, call.step_id, call.agent, call.model, call.seq, usage.input_tokens,
                    usage.output_tokens, usage.cached_input_tokens, usage.cost_usd, call.latency_seconds,
                    call.status, call.error, now_iso(),
                ),
            )
            return int(cursor.lastrowid or 0)

    def settle_model_call(self, call_id: int, call: ModelCallEntry) -> None:
        """Replace a reserved call's worst case by how it ended."""
        usage = call.usage
        with self._lock:
            self._db.execute(
                "UPDATE model_calls SET input_tokens = ?, output_tokens = ?, cached_input_tokens = ?, cost_usd = ?,"
                " latency_seconds = ?, status = ?, error = ? WHERE id = ?",
                (
                    usage.input_tokens, usage.output_tokens, usage.cached_input_tokens, usage.cost_usd,
                    call.latency_seconds, call.status, call.error, call_id,
                ),
            )

    def add_tool_call(self, run_id: str, attempt: int, call: ToolCallEntry) -> None:
        with self._lock:
            self._db.execute(
                "INSERT INTO tool_calls (run_id, attempt, step_id, agent, seq, name, arguments, status,"
                " duration_seconds, output_excerpt, artifacts_json, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    run_id, attempt, call.step_id, call.agent, call.seq, call.name, call.arguments, call.status,
                    call.duration_seconds, call.output_excerpt, dumps(list(call.artifacts)), now_iso(),
                ),
            )

    def add_plan(self, run_id: str, attempt: int, plan: dict[str, Any], reason: str | None) -> None:
        with self._lock:
            self._db.execute(
                "INSERT INTO plans (run_id, attempt, reason, plan_json, created_at) VALUES (?, ?, ?, ?, ?)",
                (run_id, attempt, reason, dumps(plan), now_iso()),
            )

    def model_calls(self, run_id: str) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(r) for r in self._db.execute("SELECT * FROM model_calls WHERE run_id = ? ORDER BY id", (run_id,))]

    def tool_calls(self, run_id: str) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(r) for r in self._db.execute("SELECT * FROM tool_calls WHERE run_id = ? ORDER BY id", (run_id,))]

    # -- queries across runs (runner stats) -------------------------------------------
    # Plain SELECTs with ISO-8601 UTC timestamps compared as text: portable to any SQL store.

    _WINDOW = "r.started_at >= ? AND r.started_at < ?"

    def runs_between(self, since: str, until: str, task: str | None = None) -> list[dict[str, Any]]:
        """Runs started in ``[since, until)`` (ISO-8601 UTC), oldest first, without their records."""
        return self._window(
            "SELECT r.run_id, r.task, r.status, r.started_at, r.finished_at, r.attempts, r.cost_usd, r.input_tokens,"
            " r.output_tokens, r.cached_input_tokens, r.model_calls, r.tool_calls, r.error_kind FROM runs r",
            since, until, task, order="r.started_at",
        )

    def steps_between(self, since: str, until: str, task: str | None = None) -> list[dict[str, Any]]:
        """The steps of the runs started in ``[since, until)``, with their run's task."""
        return self._window(
            "SELECT s.run_id, r.task, s.step_id, s.kind, s.agent, s.tool, s.model, s.status, s.error_kind,"
            " s.duration_seconds, s.cost_usd, s.input_tokens, s.output_tokens, s.model_calls, s.tool_calls"
            " FROM steps s JOIN runs r ON r.run_id = s.run_id",
            since, until, task, order="s.started_at",
        )

    def model_calls_between(self, since: str, until: str, task: str | None = None) -> list[dict[str, Any]]:
        """The model calls of the runs started in ``[since, until)``, with their run's task."""
        return self._window(
            "SELECT m.run_id, r.task, m.agent, m.model, m.status, m.input_tokens, m.output_tokens, m.cost_usd,"
            " m.latency_seconds FROM model_calls m JOIN runs r ON r.run_id = m.run_id",
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
        with self._lock:
            return [dict(row) for row in self._db.execute(query, params).fetchall()]
