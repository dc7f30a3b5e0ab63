"""The shared cap ledger, read only: what ``runner caps show`` lists.

Per scope (:mod:`runner.store.cap_ledger`): its caps, what was spent (settled charges, and
reservations carried forward after their worker died), what is reserved by calls in flight,
how much of that is held by holders known to be dead (:mod:`runner.store.cap_holders`), what
each cap leaves, and how many ledger entries there are in each status. Nothing here writes:
no table is created, no holder registered, no lock taken beyond a plain read (a ledger's
PostgreSQL liveness check reads ``pg_locks``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from runner.config.specs import SUMMED_CAPS, cap_figure
from runner.store.cap_ledger import DeadEntry, Recorded, ScopeFigures, dead_entries, read_scope
from runner.store.database import Database

ENTRY_STATUSES = ("held", "settled", "carried", "released")
"""What a ledger entry can be (see ``cap_ledger.SCHEMA``)."""


@dataclass(frozen=True)
class ScopeView:
    """One scope of the ledger as ``runner caps show`` reports it."""

    figures: ScopeFigures
    created_at: str
    entries: dict[str, int] = field(default_factory=dict)  # ledger entries by status
    dead: tuple[DeadEntry, ...] = ()  # held by dead holders, with what the run store recorded of each call

    @property
    def key(self) -> str:
        return self.figures.key

    def left(self) -> dict[str, float]:
        """What each set cap still allows: its limit less what was spent and is reserved
        (negative when a carried worst case pushed a scope past its cap)."""
        used = self.figures.spent + self.figures.reserved
        found: dict[str, float] = {}
        for cap in SUMMED_CAPS:
            limit = getattr(self.figures.caps, cap)
            if limit is not None:
                found[cap] = round(limit - cap_figure(cap, used), 8)
        return found

    def as_dict(self) -> dict[str, Any]:
        """The JSON shape: the batch report's ``ledger`` entry, with ``created_at``, ``left`` and ``entries``."""
        return {**self.figures.as_dict(), "created_at": self.created_at, "left": self.left(), "entries": self.entries,
                "dead_entries": [entry.as_dict() for entry in self.dead]}  # fmt: skip


def has_ledger(db: Database) -> bool:
    """Whether ``db`` holds a cap ledger (its ``cap_scopes`` table)."""
    return bool(db.columns("cap_scopes"))


def scope_keys(db: Database) -> list[str]:
    """Every scope's key, oldest first (none when ``db`` holds no ledger)."""
    if not has_ledger(db):
        return []
    return [str(r["key"]) for r in db.rows("SELECT key FROM cap_scopes ORDER BY created_at, key")]


def view_scopes(db: Database, keys: Iterable[str], recorded: Recorded = lambda run_id: {}) -> list[ScopeView]:
    """The scopes ``keys`` (:class:`KeyError` naming the first missing one); ``recorded`` tells
    what the run store recorded of a dead holder's calls (default: nothing known)."""
    return [_view(db, key, recorded) for key in keys]


def _view(db: Database, key: str, recorded: Recorded) -> ScopeView:
    figures = read_scope(db, key)
    created = db.row("SELECT created_at FROM cap_scopes WHERE key = ?", (key,)) or {}
    counted = {
        str(r["status"]): int(r["entries"])
        for r in db.rows("SELECT status, COUNT(*) AS entries FROM cap_entries WHERE scope = ? GROUP BY status", (key,))
    }
    entries = {status: counted.pop(status, 0) for status in ENTRY_STATUSES} | counted
    return ScopeView(figures, str(created.get("created_at", "")), entries, tuple(dead_entries(db, key, recorded)))
