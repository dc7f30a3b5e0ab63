"""The lock of an output at a URL in a PostgreSQL store: a session advisory lock keyed by the
output's URL, and a row in ``output_locks`` naming the holder (with a token of its own).

PostgreSQL drops the advisory lock when the holder's session ends (the process exited or was
killed, an administrator ended it, the network dropped). The holder checks its lock at every
heartbeat and before it writes the output: its session must still hold the advisory lock, and
the row must still name it. After a dropped connection the lock is taken again only if the row
still names this batch: any batch that takes the lock writes its own row, and one that ends
deletes it, so a row still naming this batch proves that nobody held the output in between.
Otherwise (another batch holds it now, or held it meanwhile) the lock is lost:
:class:`~runner.errors.OutputLockLost`, and the batch stops before writing the output.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
from collections.abc import Iterator
from typing import Any

from runner.errors import OutputLockLost, UsageError
from runner.store.database import Database
from runner.store.schema import Schema

SCHEMA = Schema("""
CREATE TABLE IF NOT EXISTS output_locks (
  target TEXT PRIMARY KEY,
  holder TEXT NOT NULL,
  acquired_at TEXT NOT NULL
)
""")
"""Who holds each output's lock in a PostgreSQL store (the lock itself is the advisory lock)."""


@contextlib.contextmanager
def store_lock(target: str, record: dict[str, Any], url: str, now: str) -> Iterator[Database]:
    """Hold ``target``'s lock in the store ``url`` for the block (:class:`UsageError` naming the
    holder if another batch holds it); yields the lock's own connection, for :func:`verify`."""
    from runner.store.postgres import PostgresDatabase

    db = PostgresDatabase(url, application_name=f"runner output lock {socket.gethostname()} pid {os.getpid()}"[:63])
    try:
        db.create(SCHEMA)
        db.atomic(lambda unit: _take(unit, target, record, now))  # a drop half way takes it again, whole
        db.on_reconnect(lambda again: _take_again(again, target, record))
        yield db
    finally:
        with contextlib.suppress(Exception):  # the session's end releases it anyway
            db.execute("DELETE FROM output_locks WHERE target = ? AND holder = ?", (target, json.dumps(record)), idempotent=True)
            db.execute("SELECT pg_advisory_unlock(?)", (lock_key(target),))
        db.close()


def verify(db: Database, target: str, record: dict[str, Any]) -> None:
    """:class:`OutputLockLost` unless this session holds ``target``'s advisory lock and the row
    names ``record``. A dropped connection is reconnected first (taking the lock again, or not)."""
    high, low = _halves(lock_key(target))
    found = db.row(
        "SELECT (SELECT holder FROM output_locks WHERE target = ?) AS holder, EXISTS (SELECT 1 FROM pg_locks"
        " WHERE locktype = 'advisory' AND granted AND pid = pg_backend_pid() AND classid::bigint = ?"
        " AND objid::bigint = ? AND objsubid = 1) AS held",
        (target, high, low),
    )
    if found is None or not found["held"]:
        raise OutputLockLost(f"{target}: this batch's session no longer holds the output's lock in the store {db.where}")
    if found["holder"] != json.dumps(record):
        raise OutputLockLost(f"{target}: the store {db.where} records another holder of the output's lock"
                             f"{_who(found['holder'])}")


def lock_key(target: str) -> int:
    """The advisory lock of an output: 64 bits of a SHA-256 of its URL, the same on every worker."""
    return int.from_bytes(hashlib.sha256(f"runner output:{target}".encode()).digest()[:8], "big", signed=True)


def _take(db: Database, target: str, record: dict[str, Any], now: str) -> None:
    from runner.batch.output_holder import busy_message

    if not _try_lock(db, target):
        found = db.row("SELECT holder FROM output_locks WHERE target = ?", (target,))
        holder = json.loads(found["holder"]) if found else {}
        raise UsageError(busy_message(target, holder, f" (its lock is in the store {db.where})"))
    db.execute(
        "INSERT INTO output_locks (target, holder, acquired_at) VALUES (?, ?, ?)"
        " ON CONFLICT (target) DO UPDATE SET holder = excluded.holder, acquired_at = excluded.acquired_at",
        (target, json.dumps(record), now),
    )


def _take_again(db: Database, target: str, record: dict[str, Any]) -> None:
    """After a dropped connection: the lock again, if nobody held the output in between."""
    if not _try_lock(db, target):
        found = db.row("SELECT holder FROM output_locks WHERE target = ?", (target,))
        raise OutputLockLost(_taken(target, found["holder"] if found else None, db.where))
    found = db.row("SELECT holder FROM output_locks WHERE target = ?", (target,))
    if found is None or found["holder"] != json.dumps(record):
        db.row("SELECT pg_advisory_unlock(?) AS released", (lock_key(target),))
        raise OutputLockLost(_taken(target, found["holder"] if found else None, db.where))


def _try_lock(db: Database, target: str) -> bool:
    taken = db.row("SELECT pg_try_advisory_lock(?) AS taken", (lock_key(target),))
    return taken is not None and bool(taken["taken"])


def _taken(target: str, holder: str | None, where: str) -> str:
    """Why the lock is lost: who holds it now, or that someone held it and has let it go."""
    now = f"another batch{_who(holder)} holds it now" if holder else "another batch held it meanwhile and has ended"
    return (
        f"{target}: this batch's session in the store {where} was ended (terminated, or the connection dropped), "
        f"which released the output's lock, and {now}"
    )


def _who(holder: str | None) -> str:
    """`` (pid 12, host h, task t, input i)`` from a row's holder, or nothing."""
    with contextlib.suppress(ValueError, TypeError, AttributeError):
        found = json.loads(holder or "")
        known = [f"{key} {found[key]}" for key in ("pid", "host", "task", "input") if found.get(key) is not None]
        return f" ({', '.join(known)})" if known else ""
    return ""


def _halves(key: int) -> tuple[int, int]:
    """How ``pg_locks`` shows a bigint advisory key: its high and low 32 bits as ``classid``, ``objid``."""
    return (key >> 32) & 0xFFFFFFFF, key & 0xFFFFFFFF
