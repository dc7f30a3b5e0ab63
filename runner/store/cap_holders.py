"""Who holds reservations in the shared cap ledger, and whether they are still alive.

Each process that reserves in a shared scope registers once as a holder (``cap_holders``:
a random id, its host and pid, a label) and marks every reservation with that id. Whether a
holder is alive is asked of something that dies with it, so the answer needs no clock:

* PostgreSQL: the holder's connection holds a session advisory lock keyed by its id (taken
  again after a reconnect); PostgreSQL drops it when the session ends (the process died, or
  its host went silent and TCP keepalives ended the session). A holder whose lock no session
  holds is dead.
* SQLite (one machine): the holder's pid, with the kernel's start time of that process and
  the boot it ran in. A holder whose process is gone (or whose pid now names another
  process) is dead. A holder on another host cannot be seen and counts as alive.
"""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass, field
from typing import Any

from runner.processes import process_alive, process_start
from runner.store.database import Database
from runner.store.schema import Schema
from runner.store.session_lock import advisory_key

SCHEMA = Schema("""
CREATE TABLE IF NOT EXISTS cap_holders (
  holder TEXT PRIMARY KEY,
  label TEXT NOT NULL,
  host TEXT NOT NULL,
  pid {bigint} NOT NULL,
  process_started TEXT,
  started_at TEXT NOT NULL
)
""")
"""One row per process that ever reserved in a shared scope."""


@dataclass(frozen=True)
class Holder:
    """This process as a holder of reservations: its id, and how others can tell it is alive."""

    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    host: str = field(default_factory=socket.gethostname)
    pid: int = field(default_factory=os.getpid)
    process_started: str | None = field(default_factory=lambda: process_start(os.getpid()))

    @property
    def label(self) -> str:
        return f"{self.host} pid {self.pid}"

    def register(self, db: Database, now: str) -> None:
        """Record this holder (safe to repeat) and, on PostgreSQL, take its liveness lock (again
        after every reconnect, before anything else is sent)."""
        db.execute(
            "INSERT INTO cap_holders (holder, label, host, pid, process_started, started_at) VALUES (?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (holder) DO NOTHING",
            (self.id, self.label, self.host, self.pid, self.process_started, now),
            idempotent=True,
        )
        if db.dialect == "postgresql":
            take = f"SELECT pg_advisory_lock({lock_key(self.id)})"
            db.row(take)
            db.on_reconnect(lambda again: again.row(take))


def dead(db: Database, holders: set[str]) -> dict[str, str]:
    """The holders among ``holders`` that are known to be dead, with their labels."""
    if not holders:
        return {}
    marks = ", ".join("?" for _ in holders)
    rows = db.rows(f"SELECT * FROM cap_holders WHERE holder IN ({marks})", sorted(holders))
    if db.dialect == "postgresql":
        held = _locks_held(db, [r["holder"] for r in rows])
        return {r["holder"]: r["label"] for r in rows if r["holder"] not in held}
    return {r["holder"]: r["label"] for r in rows if not _process_alive(r)}


def lock_key(holder: str) -> int:
    """The advisory lock of ``holder``: the same on every worker."""
    return advisory_key("runner cap holder", holder)


def _locks_held(db: Database, holders: list[str]) -> set[str]:
    keys = {lock_key(h): h for h in holders}
    found = db.rows(
        "SELECT (classid::bigint << 32) | objid::bigint AS key FROM pg_locks WHERE locktype = 'advisory' AND granted"
        " AND objsubid = 1 AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
    )
    signed = {_signed(int(r["key"])) for r in found}
    return {holder for key, holder in keys.items() if key in signed}


def _signed(key: int) -> int:
    return key - (1 << 64) if key >= 1 << 63 else key


def _process_alive(row: dict[str, Any]) -> bool:
    return process_alive(str(row["host"]), int(row["pid"]), row.get("process_started"))
