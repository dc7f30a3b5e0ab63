"""One batch at a time per output at a URL (``s3://``, ``gs://``, ``local://``, ``memory://``, ...).

A local output file is locked with a ``flock`` (:func:`runner.batch.output.exclusive_output`).
An output at a URL gets one of two locks, held for the whole batch, so a second batch writing
the same output is refused (naming the first) instead of silently replacing its records:

* with a PostgreSQL store (``--store-url``, ``$RUNNER_STORE_URL``): a session advisory lock
  keyed by the output's URL, and a row in ``output_locks`` saying who holds it. PostgreSQL
  drops the lock when the holder's session ends (it exited, was killed, or its host went
  silent); after a dropped connection the lock is taken again, or the batch stops.
* otherwise: a lock object next to the output (``.<name>.lock``), created with the
  filesystem's create-exclusive mode (``xb``: ``O_EXCL`` locally, a conditional put on object
  stores that offer one). It says who holds it and until when (a lease the holder renews
  while the batch runs). It is stale, and taken over, when its process is gone (same host)
  or its lease has run out (another host, whose processes cannot be seen from here).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import os
import socket
import threading
import uuid
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from runner.errors import UsageError
from runner.locations import bounded, shown
from runner.store.cap_holders import process_start
from runner.store.schema import Schema

LEASE_SECONDS = 120.0
"""How long a lock object stays valid without its holder renewing it (every third of that)."""
SCHEMA = Schema("""
CREATE TABLE IF NOT EXISTS output_locks (
  target TEXT PRIMARY KEY,
  holder TEXT NOT NULL,
  acquired_at TEXT NOT NULL
)
""")
"""Who holds each output's lock in a PostgreSQL store (the lock itself is the advisory lock)."""
log = logging.getLogger("runner.batch")

if TYPE_CHECKING:
    from upath import UPath


@contextlib.contextmanager
def exclusive_url_output(
    target: UPath, holder: Mapping[str, Any], *, store_url: str | None = None, lease_seconds: float = LEASE_SECONDS
) -> Iterator[None]:
    """Hold the lock of the output ``target`` (a URL) for the block; :class:`UsageError` naming
    the holder if another batch holds it. ``holder`` (task, input, journal) is what the refused
    batch is told; the lock is in the store ``store_url`` when given, else next to the output."""
    record = {"pid": os.getpid(), "host": socket.gethostname(), **holder}
    lock = _store_lock(str(target), record, store_url) if store_url else _object_lock(target, record, lease_seconds)
    with lock:
        yield


def busy_message(target: object, holder: Mapping[str, Any], where: str = "") -> str:
    """The refusal of a second batch: who holds the output (pid, host, task, input, journal) and what to do."""
    known = [f"{key} {holder[key]}" for key in ("pid", "host", "task", "input", "journal") if holder.get(key) is not None]
    who = f" ({', '.join(known)})" if known else ""
    return (
        f"{target}: another batch{who} is writing this output file right now{where}; give this batch its own "
        "--output, or wait for that batch to end"
    )


# --- a lock in the PostgreSQL store ---------------------------------------------------------------


@contextlib.contextmanager
def _store_lock(target: str, record: dict[str, Any], url: str) -> Iterator[None]:
    from runner.store.postgres import PostgresDatabase

    db = PostgresDatabase(url, application_name=f"runner output lock {socket.gethostname()} pid {os.getpid()}"[:63])
    try:
        db.create(SCHEMA)
        _take(db, target, record, again=False)
        db.on_reconnect(lambda again: _take(again, target, record, again=True))
        yield
    finally:
        with contextlib.suppress(Exception):  # the session's end releases it anyway
            db.execute("DELETE FROM output_locks WHERE target = ? AND holder = ?", (target, json.dumps(record)), idempotent=True)
            db.execute("SELECT pg_advisory_unlock(?)", (_key(target),))
        db.close()


def _take(db: Any, target: str, record: dict[str, Any], *, again: bool) -> None:
    taken = db.row("SELECT pg_try_advisory_lock(?) AS taken", (_key(target),))
    if taken is None or not taken["taken"]:
        found = db.row("SELECT holder FROM output_locks WHERE target = ?", (target,))
        holder = json.loads(found["holder"]) if found else {}
        where = f" (its lock is in the store {db.where})"
        if again:
            where += "; it took the output while this batch's connection to the store was down, so this batch stops"
        raise UsageError(busy_message(target, holder, where))
    db.execute(
        "INSERT INTO output_locks (target, holder, acquired_at) VALUES (?, ?, ?)"
        " ON CONFLICT (target) DO UPDATE SET holder = excluded.holder, acquired_at = excluded.acquired_at",
        (target, json.dumps(record), _now().isoformat()),
        idempotent=True,
    )


def _key(target: str) -> int:
    import hashlib

    return int.from_bytes(hashlib.sha256(f"runner output:{target}".encode()).digest()[:8], "big", signed=True)


# --- a lock object next to the output -------------------------------------------------------------


@contextlib.contextmanager
def _object_lock(target: UPath, record: dict[str, Any], lease_seconds: float) -> Iterator[None]:
    lock = target.parent / f".{target.name}.lock"
    mine = {**record, "token": uuid.uuid4().hex, "process_started": process_start(os.getpid()), "acquired_at": _now().isoformat()}
    _create(target, lock, mine, lease_seconds)
    stop = threading.Event()
    renewer = threading.Thread(target=_renew, args=(lock, mine, lease_seconds, stop), daemon=True, name="output lock")
    renewer.start()
    try:
        yield
    finally:
        stop.set()
        renewer.join()
        with contextlib.suppress(OSError):  # RemoteTimedOut too: a lease that is not renewed runs out
            bounded(f"releasing the output lock {shown(lock)}", lambda: _release(lock, mine))


def _create(target: UPath, lock: UPath, mine: dict[str, Any], lease_seconds: float) -> None:
    """Create ``lock`` holding ``mine``; take it over once if the one there is stale; else refuse."""
    what = f"taking the output lock {shown(lock)}"  # each remote call bounded: a storage that never answers stops the batch
    bounded(what, lambda: lock.fs.makedirs(lock.fs._parent(lock.path), exist_ok=True))
    for _ in range(2):
        if bounded(what, lambda: _create_exclusive(lock, _leased(mine, lease_seconds))):
            return
        found = bounded(what, lambda: _read(lock))
        if found is None:
            continue  # it was released in between
        if not stale(found):
            until = f" until {found['expires_at']}" if found.get("expires_at") else ""
            raise UsageError(busy_message(target, found, (
                f" (its lock is {lock}, held{until}; if that batch is gone for good, delete the lock)"
            )))  # fmt: skip
        log.warning("taking over the stale output lock %s (held by pid %s on %s)", lock, found.get("pid"), found.get("host"))
        with contextlib.suppress(FileNotFoundError):
            bounded(what, lambda: lock.fs.rm_file(lock.path))
    raise UsageError(f"{lock}: another batch took this output's lock at the same moment; wait for it to end")


def _create_exclusive(lock: UPath, record: dict[str, Any]) -> bool:
    """Write ``record`` to ``lock`` if nothing is there; whether it was written by this call."""
    data = json.dumps(record).encode()
    try:
        with lock.fs.open(lock.path, "xb") as handle:
            handle.write(data)
        return True
    except FileExistsError:
        return False
    except (ValueError, NotImplementedError, TypeError):  # a filesystem without create-exclusive: check, write, read back
        if lock.fs.exists(lock.path):
            return False
        lock.fs.pipe_file(lock.path, data)
        return (_read(lock) or {}).get("token") == record["token"]


def stale(found: Mapping[str, Any], now: dt.datetime | None = None) -> bool:
    """Whether a lock object's holder is gone: its process (same host), or its lease (any host)."""
    if found.get("host") == socket.gethostname() and found.get("pid") is not None:
        started = found.get("process_started")
        if started and process_start(int(found["pid"])) != started:
            return True
    expires = found.get("expires_at")
    try:
        return expires is not None and dt.datetime.fromisoformat(str(expires)) < (now or _now())
    except ValueError:
        return True  # a lock nobody could renew


def _renew(lock: UPath, mine: dict[str, Any], lease_seconds: float, stop: threading.Event) -> None:
    while not stop.wait(lease_seconds / 3):
        with contextlib.suppress(OSError):  # RemoteTimedOut too: tried again at the next renewal
            if (bounded(f"reading the output lock {shown(lock)}", lambda: _read(lock)) or {}).get("token") != mine["token"]:
                log.warning("the output lock %s is no longer this batch's (taken over as stale?)", lock)
                return
            data = json.dumps(_leased(mine, lease_seconds)).encode()
            bounded(f"renewing the output lock {shown(lock)}", lambda: lock.fs.pipe_file(lock.path, data))  # noqa: B023  # called at once


def _release(lock: UPath, mine: Mapping[str, Any]) -> None:
    if (_read(lock) or {}).get("token") == mine["token"]:
        lock.fs.rm_file(lock.path)


def _read(lock: UPath) -> dict[str, Any] | None:
    try:
        found = json.loads(lock.fs.cat_file(lock.path) or b"{}")
    except FileNotFoundError:
        return None
    except ValueError:
        return {}  # unreadable (half written?): not taken over, the refusal says to delete it
    return found if isinstance(found, dict) else {}


def _leased(mine: dict[str, Any], lease_seconds: float) -> dict[str, Any]:
    return {**mine, "expires_at": (_now() + dt.timedelta(seconds=lease_seconds)).isoformat()}


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)
