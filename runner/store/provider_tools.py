"""The tool results of runs whose model calls go through provider batches (``runner batch
--via batch-api``), kept so a resumed run replays them instead of running the tools again.

A resumed run is answered from the provider answers it stored
(:mod:`runner.store.provider_answers`) only while it sends the very same requests; a tool whose
output changes from one run to the next (the time, a random number, a file it appends to)
would change the next request, and that request would be sent, and paid for, again. So every
tool result (or failure) is kept here under the run's id and a key naming its place in the
conversation (:mod:`runner.agent.replay`), with the state of the run's workspace right after
it. Redacted before it is written, like everything else in the store.
"""

from __future__ import annotations

import json
from typing import Any

from runner.store.database import Database
from runner.store.runstore import now_iso
from runner.store.schema import Schema

SCHEMA = Schema("""
CREATE TABLE IF NOT EXISTS provider_tool_results (
  run_id TEXT NOT NULL,
  call_key TEXT NOT NULL,
  seq {bigint} NOT NULL,
  result_json TEXT NOT NULL,
  workspace_state TEXT NOT NULL,
  recorded_at TEXT NOT NULL,
  PRIMARY KEY (run_id, call_key)
)
""")
"""The table, for both backends (:mod:`runner.store.schema`)."""


class ProviderToolResults:
    """Tool results of provider-batch runs, by run id and call key, in the order they were kept."""

    def __init__(self, db: Database, *, create: bool = True):
        """``create=False``: the table is known to exist (the batch's rounds created it)."""
        self._db = db
        if create:
            db.create(SCHEMA)

    def keep(self, run_id: str, call_key: str, result: dict[str, Any], workspace_state: str) -> None:
        """Keep one call's result (already redacted) and the workspace state it left (the latest wins)."""
        text = json.dumps(result, ensure_ascii=False, sort_keys=True)

        def write(db: Database) -> None:  # safe to repeat: the same row again, at the next number
            found = db.row(
                "SELECT COALESCE(MAX(seq), 0) AS last FROM provider_tool_results WHERE run_id = ?", (run_id,)
            )
            seq = int(found["last"]) + 1 if found is not None else 1
            db.execute(
                "INSERT INTO provider_tool_results (run_id, call_key, seq, result_json, workspace_state, recorded_at)"
                " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (run_id, call_key) DO UPDATE SET seq = excluded.seq,"
                " result_json = excluded.result_json, workspace_state = excluded.workspace_state, recorded_at = excluded.recorded_at",
                (run_id, call_key, seq, text, workspace_state, now_iso()),
            )

        self._db.atomic(write)

    def result(self, run_id: str, call_key: str) -> dict[str, Any] | None:
        """The result kept for this call, if any."""
        row = self._db.row(
            "SELECT result_json FROM provider_tool_results WHERE run_id = ? AND call_key = ?", (run_id, call_key)
        )
        value = json.loads(row["result_json"]) if row is not None else None
        return value if isinstance(value, dict) else None

    def last_workspace(self, run_id: str) -> str | None:
        """The workspace state the run's last kept call left (``None``: no call kept)."""
        row = self._db.row(
            "SELECT workspace_state FROM provider_tool_results WHERE run_id = ? ORDER BY seq DESC LIMIT 1", (run_id,)
        )
        return str(row["workspace_state"]) if row is not None else None

    def forget(self, run_id: str) -> None:
        """Drop the run's kept results (its workspace no longer matches them: its tools run again)."""
        self._db.execute("DELETE FROM provider_tool_results WHERE run_id = ?", (run_id,), idempotent=True)
