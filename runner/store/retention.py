"""Retention: delete runs that ended before a cutoff, with their steps, calls, plans,
transcript entries, budget warnings, provider-batch answers and tool results, then the transcript blobs no
remaining run refers to.

A run still marked ``running`` is never deleted (it may be in progress on another worker).
Report directories on disk are not touched.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from runner.core.ages import before
from runner.store.database import Database
from runner.store.provider_answers import UNCLAIMED

RUN_TABLES = ("steps", "model_calls", "tool_calls", "plans", "transcript_entries", "transcript_refs", "budget_warnings", "runs")
PROVIDER_TABLES = ("provider_answers", "provider_tool_results")
"""What a run sent through provider batches kept (made on first use: a store may not have them)."""
_OLD = "u.status != 'running' AND COALESCE(u.finished_at, u.started_at) < ?"  # a run the prune deletes
_CHUNK = 500
_UNCLAIMED_OLD = "run_id = ? AND sent_at < ?"


@dataclass(frozen=True)
class Pruned:
    """What a prune deleted (or, in a dry run, would delete)."""

    cutoff: str
    runs: int
    rows: dict[str, int]  # rows per table
    blobs: int
    blob_chars: int
    kept_runs: int
    kept_running: int  # runs older than the cutoff kept because they are still marked running
    dry_run: bool

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def prune(db: Database, older_than: timedelta, *, dry_run: bool, now: datetime | None = None) -> Pruned:
    """Delete the runs that ended more than ``older_than`` ago (or count them, with ``dry_run``:
    reads only, so a store opened read-only can answer). An age reaching before the year 1
    deletes nothing."""
    cutoff = before(now or datetime.now(UTC), older_than).isoformat(timespec="milliseconds")
    if dry_run:
        return _prune(db, cutoff, dry_run=True)
    # One transaction, safe to run again after a lost connection (what is deleted is gone the second time).
    return db.atomic(lambda unit: _prune(unit, cutoff, dry_run=False))


def _prune(db: Database, cutoff: str, dry_run: bool) -> Pruned:
    old = [r["run_id"] for r in db.rows(f"SELECT run_id FROM runs u WHERE {_OLD}", (cutoff,))]
    running = db.row("SELECT COUNT(*) AS n FROM runs WHERE status = 'running' AND started_at < ?", (cutoff,))
    total = db.row("SELECT COUNT(*) AS n FROM runs")
    tables = [*RUN_TABLES[:-1], *(t for t in PROVIDER_TABLES if db.columns(t)), RUN_TABLES[-1]]
    rows = {table: _count(db, table, old) for table in tables if table != "runs"}
    unclaimed = "provider_answers" in tables  # answers no run claimed (runner.store.provider_answers): by age
    if unclaimed:
        found = db.row(f"SELECT COUNT(*) AS n FROM provider_answers WHERE {_UNCLAIMED_OLD}", (UNCLAIMED, cutoff))
        rows["provider_answers"] += int(found["n"]) if found else 0
    blobs = _orphans(db, cutoff)
    if not dry_run:
        for table in tables:
            _delete(db, table, old)
        if unclaimed:
            db.execute(f"DELETE FROM provider_answers WHERE {_UNCLAIMED_OLD}", (UNCLAIMED, cutoff))
        if db.dialect == "postgresql":
            # A writer references a blob (that reference first, then the blob's INSERT ... DO NOTHING,
            # which locks nothing) in a transaction this one cannot see yet: wait for every writer of
            # references to commit, and hold new ones off, so the delete below sees their references.
            # (SQLite's one writer at a time already orders them.)
            db.execute("LOCK TABLE transcript_refs IN SHARE MODE")
        db.execute("DELETE FROM transcript_blobs WHERE NOT EXISTS"
                   " (SELECT 1 FROM transcript_refs r WHERE r.digest = transcript_blobs.digest)")  # fmt: skip
    assert running is not None and total is not None
    return Pruned(
        cutoff, len(old), rows, int(blobs["n"]), int(blobs["chars"]), int(total["n"]) - len(old), int(running["n"]),
        dry_run,
    )


def _chunks(run_ids: list[str]) -> list[list[str]]:
    return [run_ids[i : i + _CHUNK] for i in range(0, len(run_ids), _CHUNK)]


def _count(db: Database, table: str, run_ids: list[str]) -> int:
    total = 0
    for chunk in _chunks(run_ids):
        row = db.row(f"SELECT COUNT(*) AS n FROM {table} WHERE run_id IN ({_marks(chunk)})", chunk)
        total += int(row["n"]) if row else 0
    return total


def _delete(db: Database, table: str, run_ids: list[str]) -> None:
    for chunk in _chunks(run_ids):
        db.execute(f"DELETE FROM {table} WHERE run_id IN ({_marks(chunk)})", chunk)


def _orphans(db: Database, cutoff: str) -> dict[str, Any]:
    """Blobs that no run staying after the prune refers to (already orphaned ones too); a
    reference of a run the store no longer has keeps its blob, as the delete does."""
    row = db.row(
        "SELECT COUNT(*) AS n, COALESCE(SUM(b.chars), 0) AS chars FROM transcript_blobs b WHERE NOT EXISTS"
        " (SELECT 1 FROM transcript_refs r LEFT JOIN runs u ON u.run_id = r.run_id"
        f" WHERE r.digest = b.digest AND (u.run_id IS NULL OR NOT ({_OLD})))",
        (cutoff,),
    )
    assert row is not None
    return row


def _marks(chunk: list[str]) -> str:
    return ", ".join("?" for _ in chunk)
