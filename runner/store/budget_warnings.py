"""The budget warnings runs met (:class:`~runner.core.budget_warnings.BudgetWarning`), in the run
store: one row per ``warn_at`` share a run's call took a budget window past, with the run that
did and, once sent, what each of the budget's ``deliver:`` targets made of it. ``runner stats``
lists them over its window; a run's next attempt sends what an earlier one did not deliver.
"""

from __future__ import annotations

import json
from typing import Any

from runner.core.budget_warnings import BudgetWarning
from runner.store.database import Database
from runner.store.schema import Schema

SCHEMA = Schema("""
CREATE TABLE IF NOT EXISTS budget_warnings (
  run_id TEXT NOT NULL,
  attempt {int} NOT NULL,
  budget TEXT NOT NULL,
  window_key TEXT NOT NULL,
  scope TEXT NOT NULL,
  cap TEXT NOT NULL,
  threshold {real} NOT NULL,
  cap_limit {real} NOT NULL,
  spent {real} NOT NULL,
  at TEXT NOT NULL,
  deliveries_json TEXT,
  PRIMARY KEY (run_id, window_key, cap, threshold)
);
CREATE INDEX IF NOT EXISTS budget_warnings_by_time ON budget_warnings (at)
""")
"""The table, for both backends (:mod:`runner.store.schema`)."""


class BudgetWarningLog:
    """The ``budget_warnings`` table of one run store database."""

    def __init__(self, db: Database, *, now: Any, create: bool = True) -> None:
        """``create=False``: the table is known to exist (a store opened read-only)."""
        self._db, self._now = db, now
        if create:
            db.create(SCHEMA)

    def add(self, run_id: str, attempt: int, warning: BudgetWarning) -> None:
        """Keep ``warning`` as one that run ``run_id`` met (once: the same again is left alone)."""
        w = warning
        self._db.execute(
            "INSERT INTO budget_warnings (run_id, attempt, budget, window_key, scope, cap, threshold, cap_limit, spent, at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (run_id, window_key, cap, threshold) DO NOTHING",
            (run_id, attempt, w.budget, w.window, w.scope, w.cap, w.threshold, w.limit, w.spent, self._now()),
            idempotent=True,
        )

    def of_run(self, run_id: str) -> list[tuple[BudgetWarning, list[dict[str, Any]]]]:
        """The warnings run ``run_id`` met, in order, each with the delivery outcomes kept for it."""
        rows = self._db.rows("SELECT * FROM budget_warnings WHERE run_id = ? ORDER BY at, threshold", (run_id,))
        return [(warning_of(row), json.loads(row["deliveries_json"] or "[]")) for row in rows]

    def delivered(self, run_id: str, warning: BudgetWarning, outcomes: list[dict[str, Any]]) -> None:
        """Keep what the budget's delivery targets made of ``warning`` (``DeliveryOutcome.as_dict``)."""
        self._db.execute(
            "UPDATE budget_warnings SET deliveries_json = ? WHERE run_id = ? AND window_key = ? AND cap = ? AND threshold = ?",
            (json.dumps(outcomes), run_id, warning.window, warning.cap, warning.threshold),
            idempotent=True,
        )

    def between(self, since: str, until: str, task: str | None = None) -> list[dict[str, Any]]:
        """The warnings met in ``[since, until)`` (ISO-8601 UTC), oldest first: each
        :meth:`BudgetWarning.as_dict` with when, the run and its task, and its deliveries."""
        query = (
            "SELECT w.*, r.task FROM budget_warnings w JOIN runs r ON r.run_id = w.run_id WHERE w.at >= ? AND w.at < ?"
            + (" AND r.task = ?" if task else "") + " ORDER BY w.at, w.threshold"
        )  # fmt: skip
        rows = self._db.rows(query, (since, until, task) if task else (since, until))
        return [
            {**warning_of(row).as_dict(), "at": row["at"], "run_id": row["run_id"], "task": row["task"],
             "deliveries": json.loads(row["deliveries_json"] or "[]")}
            for row in rows
        ]  # fmt: skip


def warning_of(row: dict[str, Any]) -> BudgetWarning:
    """A stored row as :class:`BudgetWarning` (its columns ``window_key`` and ``cap_limit``
    are the fields ``window`` and ``limit``, words SQL keeps for itself)."""
    return BudgetWarning.from_dict({**row, "window": row["window_key"], "limit": row["cap_limit"]})
