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
import json
import os
import socket
from collections.abc import Iterator
from typing import Any

from runner.errors import OutputLockLost, UsageError
from runner.store.database import Database
from runner.store.session_lock import Retaken, SessionLock, who

LOCK = SessionLock(table="output_locks", column="target", namespace="runner output")
"""Each output's lock: the advisory lock, and who holds it in ``output_locks``."""
SCHEMA = LOCK.schema
_HOLDER_KEYS = ("pid", "host", "task", "input")


@contextlib.contextmanager
def store_lock(target: str, record: dict[str, Any], url: str, now: str) -> Iterator[Database]:
    """Hold ``target``'s lock in the store ``url`` for the block (:class:`UsageError` naming the
    holder if another batch holds it); yields the lock's own connection, for :func:`verify`."""
    from runner.store.postgres import PostgresDatabase

    holder = json.dumps(record)
    db = PostgresDatabase(url, application_name=f"runner output lock {socket.gethostname()} pid {os.getpid()}"[:63])
    try:
        db.create(SCHEMA)
        db.atomic(lambda unit: _take(unit, target, holder, now))  # a drop half way takes it again, whole
        db.on_reconnect(lambda again: _take_again(again, target, holder))
        yield db
    finally:
        with contextlib.suppress(Exception):  # the session's end releases it anyway
            LOCK.release(db, target, holder)
        db.close()


def verify(db: Database, target: str, record: dict[str, Any]) -> None:
    """:class:`OutputLockLost` unless this session holds ``target``'s advisory lock and the row
    names ``record``. A dropped connection is reconnected first (taking the lock again, or not)."""
    if not LOCK.held_here(db, target):
        raise OutputLockLost(f"{target}: this batch's session no longer holds the output's lock in the store {db.where}")
    holder = LOCK.holder(db, target)
    if holder != json.dumps(record):
        raise OutputLockLost(f"{target}: the store {db.where} records another holder of the output's lock"
                             f"{who(holder, _HOLDER_KEYS)}")


def lock_key(target: str) -> int:
    """The advisory lock of an output: 64 bits of a SHA-256 of its URL, the same on every worker."""
    return LOCK.key(target)


def _take(db: Database, target: str, holder: str, now: str) -> None:
    from runner.batch.output_holder import busy_message

    if not LOCK.take(db, target, holder, now):
        found = LOCK.holder(db, target)
        raise UsageError(busy_message(target, json.loads(found) if found else {}, f" (its lock is in the store {db.where})"))


def _take_again(db: Database, target: str, holder: str) -> None:
    """After a dropped connection: the lock again, if nobody held the output in between."""
    retaken = LOCK.take_again(db, target, holder)
    if retaken is Retaken.HELD_AGAIN:
        return
    other = LOCK.holder(db, target)
    now = f"another batch{who(other, _HOLDER_KEYS)} holds it now" if other else "another batch held it meanwhile and has ended"
    raise OutputLockLost(
        f"{target}: this batch's session in the store {db.where} was ended (terminated, or the connection dropped), "
        f"which released the output's lock, and {now}"
    )
