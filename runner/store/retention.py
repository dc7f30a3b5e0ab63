"""Retention: delete runs that ended before a cutoff, with their steps, calls, plans and
transcript entries, then the transcript blobs no remaining run refers to.

A run still marked ``running`` is never deleted (it may be in progress on another worker).
Report directories on disk are not touched.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from runner.store.database import Database

RUN_TABLES = ("steps", "model_calls", "tool_calls", "plans", "transcript_entries", "transcript_refs", "runs")
_AGE = re.compile(r"^\s*(\d+)\s*([smhdw])\s*$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
_CHUNK = 500


def parse_age(text: str) -> timedelta:
    """``30d``, ``12h``, ``2w``, ``90m``, ``45s`` as a duration; :class:`ValueError` names the accepted forms."""
    found = _AGE.match(text)
    if not found or int(found.group(1)) <= 0:
        raise ValueError(f"{text!r} is not an age; use a positive number and a unit: s, m, h, d or w (e.g. 30d)")
    try:
        return timedelta(**{_UNITS[found.group(2)]: int(found.group(1))})
    except OverflowError:
        raise ValueError(f"{text!r} is too long an age") from None


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
    """Delete the runs that ended more than ``older_than`` ago (or count them, with ``dry_run``)."""
    cutoff = ((now or datetime.now(UTC)) - older_than).isoformat(timespec="milliseconds")
    # One transaction, safe to run again after a lost connection (what is deleted is gone the second time).
    return db.atomic(lambda unit: _prune(unit, cutoff, dry_run))


def _prune(db: Database, cutoff: str, dry_run: bool) -> Pruned:
    old = [r["run_id"] for r in db.rows(
        "SELECT run_id FROM runs WHERE status != 'running' AND COALESCE(finished_at, started_at) < ?", (cutoff,)
    )]  # fmt: skip
    running = db.row("SELECT COUNT(*) AS n FROM runs WHERE status = 'running' AND started_at < ?", (cutoff,))
    total = db.row("SELECT COUNT(*) AS n FROM runs")
    rows = {table: _count(db, table, old) for table in RUN_TABLES if table != "runs"}
    blobs = _orphans(db, old)
    if not dry_run:
        for table in RUN_TABLES:
            _delete(db, table, old)
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


def _orphans(db: Database, run_ids: list[str]) -> dict[str, Any]:
    """Blobs that no run outside ``run_ids`` refers to (already orphaned ones too)."""
    where = ""
    if run_ids:
        db.execute("CREATE TEMPORARY TABLE IF NOT EXISTS pruned_runs (run_id TEXT PRIMARY KEY)")
        db.execute("DELETE FROM pruned_runs")
        db.executemany("INSERT INTO pruned_runs (run_id) VALUES (?)", [(r,) for r in run_ids])
        where = " AND r.run_id NOT IN (SELECT run_id FROM pruned_runs)"
    row = db.row(
        "SELECT COUNT(*) AS n, COALESCE(SUM(b.chars), 0) AS chars FROM transcript_blobs b WHERE NOT EXISTS"
        f" (SELECT 1 FROM transcript_refs r WHERE r.digest = b.digest{where})"
    )
    assert row is not None
    return row


def _marks(chunk: list[str]) -> str:
    return ", ".join("?" for _ in chunk)
