"""One holder at a time, across every worker of a PostgreSQL store: a session advisory lock and
a row naming its holder.

The lock is ``pg_try_advisory_lock`` on a key derived from the locked thing's name, held by
the holder's connection; PostgreSQL releases it when that session ends (on release, when the
process dies and its socket closes, when an administrator ends it, or when its host goes
silent and TCP keepalives end the session). The row (``table``: name, holder, acquired_at)
says who holds it, so a process refused can name the holder, and it is what makes taking the
lock again after a dropped connection safe: every holder writes its own row when it takes the
lock and deletes it when it lets go, so a row that still names this holder proves nobody held
the lock in between (:meth:`SessionLock.take_again`).

The batch journal and an output at a URL are locked this way
(:mod:`runner.batch.journal_postgres`, :mod:`runner.batch.output_lock_store`); what a refusal
or a lost lock means is theirs to say. The shared cap ledger's holders
(:mod:`runner.store.cap_holders`) key their liveness locks with :func:`advisory_key` too.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from dataclasses import dataclass
from enum import Enum

from runner.store.database import Database
from runner.store.schema import Schema


class Retaken(Enum):
    """What :meth:`SessionLock.take_again` found after a dropped connection."""

    HELD_AGAIN = "held again"
    """Nobody held it in between: this session holds it again."""
    HELD_BY_ANOTHER = "held by another"
    """Another holder's session holds it now."""
    HELD_MEANWHILE = "held meanwhile"
    """Another holder took it while this one was away and has let it go since."""


@dataclass(frozen=True)
class SessionLock:
    """The lock of things named in ``column`` of ``table``, keyed under ``namespace``."""

    table: str
    column: str
    namespace: str

    @property
    def schema(self) -> Schema:
        """The holders' table (the lock itself is the advisory lock)."""
        return Schema(
            "CREATE TABLE IF NOT EXISTS {table} (\n  {column} TEXT PRIMARY KEY,\n  holder TEXT NOT NULL,\n"
            "  acquired_at TEXT NOT NULL\n)",
            names=(("table", self.table), ("column", self.column)),
        )

    def key(self, name: str) -> int:
        """The advisory lock of ``name``: the same on every worker."""
        return advisory_key(self.namespace, name)

    def take(self, db: Database, name: str, holder: str, now: str) -> bool:
        """Take ``name``'s lock and write ``holder``'s row; ``False`` if another session holds it."""
        if not self._try(db, name):
            return False
        db.execute(
            f"INSERT INTO {self.table} ({self.column}, holder, acquired_at) VALUES (?, ?, ?)"
            f" ON CONFLICT ({self.column}) DO UPDATE SET holder = excluded.holder, acquired_at = excluded.acquired_at",
            (name, holder, now),
        )
        return True

    def take_again(self, db: Database, name: str, holder: str) -> Retaken:
        """After a dropped connection, on the new session: the lock again, if its row still names
        ``holder`` (nobody held it in between); otherwise it is left to the other holder."""
        if not self._try(db, name):
            return Retaken.HELD_BY_ANOTHER
        if self.holder(db, name) != holder:
            db.row("SELECT pg_advisory_unlock(?) AS released", (self.key(name),))
            return Retaken.HELD_MEANWHILE
        return Retaken.HELD_AGAIN

    def release(self, db: Database, name: str, holder: str) -> None:
        """Delete ``holder``'s own row (another holder's is kept) and let the lock go."""
        db.execute(f"DELETE FROM {self.table} WHERE {self.column} = ? AND holder = ?", (name, holder), idempotent=True)
        db.execute("SELECT pg_advisory_unlock(?)", (self.key(name),))

    def holder(self, db: Database, name: str) -> str | None:
        """The holder row of ``name`` (as its holder wrote it), or ``None``."""
        found = db.row(f"SELECT holder FROM {self.table} WHERE {self.column} = ?", (name,))
        return None if found is None else str(found["holder"])

    def held_here(self, db: Database, name: str) -> bool:
        """Whether this connection's session holds ``name``'s advisory lock."""
        high, low = _halves(self.key(name))
        found = db.row(
            "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted AND pid = pg_backend_pid()"
            " AND classid::bigint = ? AND objid::bigint = ? AND objsubid = 1) AS held",
            (high, low),
        )
        return found is not None and bool(found["held"])

    def session(self, db: Database, name: str) -> str:
        """`` (session 1234, 'runner batch host pid 99' from 10.0.0.7)``: the session holding
        ``name``'s lock, or nothing if it cannot be seen."""
        high, low = _halves(self.key(name))
        found = db.row(
            "SELECT a.pid, a.application_name, a.client_addr::text AS client FROM pg_locks l"
            " JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory' AND l.granted"
            " AND l.classid::bigint = ? AND l.objid::bigint = ? AND l.objsubid = 1 LIMIT 1",
            (high, low),
        )
        if found is None:
            return ""
        client = f" from {found['client']}" if found.get("client") else ""
        return f" (session {found['pid']}, {found['application_name']!r}{client})"

    def _try(self, db: Database, name: str) -> bool:
        taken = db.row("SELECT pg_try_advisory_lock(?) AS taken", (self.key(name),))
        return taken is not None and bool(taken["taken"])


def advisory_key(namespace: str, name: str) -> int:
    """A PostgreSQL advisory lock key for ``name`` under ``namespace``: 64 bits of a SHA-256."""
    return int.from_bytes(hashlib.sha256(f"{namespace}:{name}".encode()).digest()[:8], "big", signed=True)


def who(holder: str | None, keys: tuple[str, ...] = ("pid", "host")) -> str:
    """`` (pid 12, host h)`` from a holder row's JSON (its ``keys`` that are set), or nothing."""
    with contextlib.suppress(ValueError, TypeError, AttributeError):
        found = json.loads(holder or "")
        known = [f"{key} {found[key]}" for key in keys if found.get(key) is not None]
        return f" ({', '.join(known)})" if known else ""
    return ""


def _halves(key: int) -> tuple[int, int]:
    """How ``pg_locks`` shows a bigint advisory key: its high and low 32 bits as ``classid``, ``objid``."""
    return (key >> 32) & 0xFFFFFFFF, key & 0xFFFFFFFF
