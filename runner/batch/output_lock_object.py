"""The lock of an output at a URL without a PostgreSQL store: objects next to the output.

* ``.<name>.lock`` says who holds the output: created with the filesystem's create-exclusive
  mode (``xb``: ``O_EXCL`` locally, a conditional put on object stores that offer one) and
  never rewritten. It has no expiry of its own, so an earlier version of runner (which renewed
  the lock itself and read its expiry there) never takes over a live holder's lock; it takes
  over a dead one on the same host only.
* ``.<name>.lock.<token>.lease`` says until when: written by its holder only (a renewal, every
  third of the lease), so a renewal can never overwrite another batch's lock.
* ``.<name>.lock.<token>.claim`` is created (create-exclusive) by whoever removes the lock of
  holder ``token``: a batch taking it over as stale, or the holder releasing it. Only the
  claim's creator removes that lock, so it cannot change between the creator's last read and
  the removal, and two batches taking over one stale lock cannot both win.

Stale means its process is gone (same host) or its lease ran out (any host). A holder renews
its lease, *then* looks for a claim on its lock; a taker claims, *then* reads the lease again
and backs off if it was renewed. So at least one of the two sees the other: either the taker
backs off, or the holder finds the claim and stops (:class:`~runner.errors.OutputLockLost`).

What remains (documented in the README): on a filesystem without create-exclusive writes the
create is check-write-read-back, which two batches starting in the same instant can both pass;
clocks of different hosts must agree to well within the lease; an output upload that outlasts
the lease may overlap a takeover; and a batch killed in the instant between claiming a lock
and removing it leaves both objects, which then refuse every batch (naming them) until deleted.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import os
import socket
import uuid
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from runner.errors import OutputLockLost, UsageError
from runner.locations import bounded, shown
from runner.processes import process_start

if TYPE_CHECKING:
    from upath import UPath

log = logging.getLogger("runner.batch")


class ObjectLock:
    """This batch's lock object for ``target`` (see the module doc); :meth:`verify` renews and checks it."""

    def __init__(self, target: UPath, record: dict[str, Any], lease_seconds: float) -> None:
        self.target, self.lease_seconds = target, lease_seconds
        self.lock = target.parent / f".{target.name}.lock"
        token = uuid.uuid4().hex
        self.mine = {**record, "token": token, "process_started": process_start(os.getpid()), "acquired_at": _iso(_now())}
        self._renewed: dt.datetime | None = None

    @property
    def token(self) -> str:
        return str(self.mine["token"])

    def acquire(self) -> None:
        """Create the lock; take it over once if the one there is stale; else :class:`UsageError`."""
        fs = self.lock.fs
        fs.makedirs(fs._parent(self.lock.path), exist_ok=True)
        for _ in range(3):
            self._renew()  # the lease first: a taker reading the new lock finds it at once
            if create_exclusive(self.lock, self.mine):  # no expiry of its own: the lease object has it
                return
            found = read(self.lock)
            if found is None:
                continue  # it was released in between
            if not stale(found, lease=read(self._sibling(found, "lease"))):
                raise UsageError(self._busy(found))
            self._take_over(found)
        raise UsageError(f"{self.lock}: another batch took this output's lock at the same moment; wait for it to end")

    def verify(self, *, renew: bool = False) -> None:
        """Renew the lease when due (always with ``renew``), then :class:`OutputLockLost` unless the
        lock still names this batch and nobody has claimed it."""
        if renew or self._renewed is None or _now() - self._renewed >= dt.timedelta(seconds=self.lease_seconds / 3):
            self._renew()
        found = read(self.lock)
        if (found or {}).get("token") != self.token:
            raise OutputLockLost(f"{self.target}: this batch's lock object {self.lock} {_now_held(found)}")
        if _exists(self._claim(self.token)):
            raise OutputLockLost(
                f"{self.target}: another batch is taking over this batch's lock object {self.lock} as stale "
                f"(its lease ran out: was this process paused, or this host's clock behind?)"
            )

    def release(self) -> None:
        """Remove the lock if it is still this batch's (claiming it first, as a taker would), and
        this batch's lease in any case (a holder that lost its lock may have renewed it since)."""
        with contextlib.suppress(OSError):
            if (read(self.lock) or {}).get("token") == self.token and create_exclusive(self._claim(self.token), self.mine):
                if (read(self.lock) or {}).get("token") == self.token:
                    self.lock.fs.rm_file(self.lock.path)
                self._forget(self.token)
        with contextlib.suppress(OSError):
            _remove(self._sibling(self.mine, "lease"))

    # --- internals -----------------------------------------------------------------------

    def _take_over(self, found: Mapping[str, Any]) -> None:
        """Remove the stale lock ``found`` if this batch wins its claim and its holder did not renew meanwhile."""
        token = str(found.get("token") or "")
        claim = self._claim(token)
        if not token or not create_exclusive(claim, _leased(self.mine, self.lease_seconds)):
            claimed = read(claim) if token else None
            raise UsageError(self._busy(found, claimed))
        again = read(self.lock)
        if (again or {}).get("token") != token or not stale(again or {}, lease=read(self._sibling(found, "lease"))):
            _remove(claim)  # released, taken, or renewed in between: not stale any more
            if again is None:
                return  # free now: the caller creates its own
            raise UsageError(self._busy(again))
        log.warning("taking over the stale output lock %s (held by pid %s on %s)", self.lock, found.get("pid"), found.get("host"))
        _remove(self.lock)
        self._forget(token)

    def _renew(self) -> None:
        now = _now()
        lease = self._sibling(self.mine, "lease")
        lease.fs.pipe_file(lease.path, json.dumps({"expires_at": _iso(now + dt.timedelta(seconds=self.lease_seconds))}).encode())
        self._renewed = now

    def _forget(self, token: str) -> None:
        """Remove what holder ``token`` left beside its lock (once its lock is gone)."""
        for kind in ("lease", "claim"):
            _remove(self.lock.parent / f"{self.lock.name}.{token}.{kind}")

    def _claim(self, token: str) -> UPath:
        return self.lock.parent / f"{self.lock.name}.{token}.claim"

    def _sibling(self, holder: Mapping[str, Any], kind: str) -> UPath:
        return self.lock.parent / f"{self.lock.name}.{holder.get('token')}.{kind}"

    def _busy(self, found: Mapping[str, Any], claimed: Mapping[str, Any] | None = None) -> str:
        from runner.batch.output_holder import busy_message

        if claimed is not None:
            return busy_message(self.target, found, (
                f" (its lock is {self.lock}, being taken over by pid {claimed.get('pid')} on {claimed.get('host')}; "
                f"if both are gone for good, delete {self.lock} and {self._claim(str(found.get('token')))})"
            ))  # fmt: skip
        lease = read(self._sibling(found, "lease")) or {}
        until = lease.get("expires_at") or found.get("expires_at")
        held = f", held until {until}" if until else ", held"
        return busy_message(self.target, found, (
            f" (its lock is {self.lock}{held}; if that batch is gone for good, delete the lock)"
        ))  # fmt: skip


def stale(found: Mapping[str, Any], now: dt.datetime | None = None, *, lease: Mapping[str, Any] | None = None) -> bool:
    """Whether a lock object's holder is gone: its process (same host), or its lease (any host):
    the lease object's ``expires_at``, or for a lock without one (written by an earlier
    version, which renewed the lock itself) the lock's own. A lock with neither is not stale
    (half written? its lease lost?): it is refused, naming the lock to delete."""
    if found.get("host") == socket.gethostname() and found.get("pid") is not None:
        started = found.get("process_started")
        if started and process_start(int(found["pid"])) != started:
            return True
    expires = (lease or {}).get("expires_at") if lease is not None else found.get("expires_at")
    if expires is None:
        return False
    try:
        return dt.datetime.fromisoformat(str(expires)) < (now or _now())
    except (ValueError, TypeError):
        return True  # a lock nobody could renew


def create_exclusive(lock: UPath, record: Mapping[str, Any]) -> bool:
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
        return (read(lock) or {}).get("token") == record.get("token")


def read(lock: UPath) -> dict[str, Any] | None:
    """The JSON object at ``lock`` (``None`` if absent, ``{}`` if unreadable)."""
    try:
        found = json.loads(lock.fs.cat_file(lock.path) or b"{}")
    except FileNotFoundError:
        return None
    except ValueError:
        return {}  # unreadable (half written?): not taken over, the refusal says to delete it
    return found if isinstance(found, dict) else {}


@contextlib.contextmanager
def object_lock(target: UPath, record: dict[str, Any], lease_seconds: float) -> Iterator[ObjectLock]:
    """Hold ``target``'s lock object for the block."""
    lock = ObjectLock(target, record, lease_seconds)
    where = shown(lock.lock)  # each step bounded (runner.locations.bounded): a storage that never answers stops the batch
    try:
        bounded(f"taking the output lock {where}", lock.acquire)
    except BaseException:
        with contextlib.suppress(OSError):  # RemoteTimedOut too
            bounded(f"removing the lease of {where}", lambda: _remove(lock._sibling(lock.mine, "lease")))
        raise
    try:
        yield lock
    finally:
        with contextlib.suppress(OSError):  # RemoteTimedOut too: the lease runs out by itself
            bounded(f"releasing the output lock {where}", lock.release)


def _exists(path: UPath) -> bool:
    return bool(path.fs.exists(path.path))


def _remove(path: UPath) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.fs.rm_file(path.path)


def _now_held(found: Mapping[str, Any] | None) -> str:
    if found is None:
        return "was removed (by a person, or a batch that took it over as stale)"
    who = [f"{key} {found[key]}" for key in ("pid", "host", "task") if found.get(key) is not None]
    return f"now names another batch ({', '.join(who)})" if who else "now names another batch"


def _leased(mine: Mapping[str, Any], lease_seconds: float) -> dict[str, Any]:
    return {**mine, "expires_at": _iso(_now() + dt.timedelta(seconds=lease_seconds))}


def _iso(moment: dt.datetime) -> str:
    return moment.isoformat()


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)
