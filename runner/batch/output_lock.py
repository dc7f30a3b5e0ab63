"""One batch at a time per output at a URL (``s3://``, ``gs://``, ``local://``, ``memory://``, ...).

A local output file is locked with a ``flock`` (:func:`runner.batch.output.exclusive_output`).
An output at a URL gets one of two locks, held for the whole batch, so a second batch writing
the same output is refused (naming the first) instead of silently replacing its records:

* with a PostgreSQL store (``--store-url``, ``$RUNNER_STORE_URL``): a session advisory lock
  keyed by the output's URL, and a row in ``output_locks`` saying who holds it
  (:mod:`runner.batch.output_lock_store`). PostgreSQL drops the lock when the holder's session
  ends (it exited, was killed, an administrator ended it, or its host went silent).
* otherwise: a lock object next to the output (``.<name>.lock``), created with the
  filesystem's create-exclusive mode, with a lease its holder renews
  (:mod:`runner.batch.output_lock_object`). It is stale, and taken over, when its process is
  gone (same host) or its lease has run out (another host).

Either lock can be lost while the batch runs (its session ended and another batch took the
output; its lock object was taken over). The holder watches it (:class:`OutputHold`): a
heartbeat thread checks it every :data:`HEARTBEAT_SECONDS`, and the batch checks it again
right before writing the output. Once it is lost the batch's rows are cancelled (completed
rows stay in the journal, to resume) and :class:`~runner.errors.OutputLockLost` (exit 2) says
so; the output is not written.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import os
import socket
import threading
import uuid
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from runner.batch.output_holder import busy_message
from runner.batch.output_lock_object import stale
from runner.batch.output_lock_store import SCHEMA
from runner.errors import OutputLockLost
from runner.locations import bounded, shown

__all__ = ["HEARTBEAT_SECONDS", "LEASE_SECONDS", "SCHEMA", "OutputHold", "busy_message", "exclusive_url_output", "stale",
           "while_held"]  # fmt: skip

LEASE_SECONDS = 120.0
"""How long a lock object stays valid without its holder renewing it (every third of that)."""
HEARTBEAT_SECONDS = 5.0
"""How often a batch checks that it still holds its output's lock."""
T = TypeVar("T")
log = logging.getLogger("runner.batch")

if TYPE_CHECKING:
    from upath import UPath


class OutputHold:
    """A batch's lock on its output, watched while the batch runs.

    ``verify(renew)`` is the lock's own check: it raises :class:`OutputLockLost` (or another
    :class:`RunnerError`, such as the store staying away) once the lock is not certainly this
    batch's. :meth:`watch` runs it every ``interval`` seconds on a thread; :meth:`check` runs it
    now. The first failure is kept: the lock stays lost, and listeners (:meth:`on_lost`) hear once.
    """

    def __init__(
        self, target: object, holder: Mapping[str, Any], verify: Callable[[bool], None] | None = None,
        interval: float = HEARTBEAT_SECONDS,
    ) -> None:  # fmt: skip
        self.target, self.holder, self.interval = target, dict(holder), interval
        self._verify = verify
        self._lost: OutputLockLost | None = None
        self._listeners: list[Callable[[], None]] = []
        self._guard = threading.Lock()
        self._checking = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def lost(self) -> OutputLockLost | None:
        """Why the lock is lost (``None`` while it is held)."""
        return self._lost

    def check(self) -> None:
        """:class:`OutputLockLost` if the lock is lost: asked of the lock itself now (renewing a
        lease first), not only remembered from the last heartbeat. Called before the output is written."""
        self._run(renew=True)
        if self._lost is not None:
            raise self._lost

    def on_lost(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` (from any thread) once the lock is lost; at once if it is already."""
        with self._guard:
            if self._lost is None:
                self._listeners.append(listener)
                return
        listener()

    @contextlib.contextmanager
    def watch(self) -> Iterator[OutputHold]:
        """Check the lock every ``interval`` seconds, on a thread, for the block."""
        if self._verify is None:
            yield self
            return
        self._thread = threading.Thread(target=self._beat, daemon=True, name="output lock heartbeat")
        self._thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            self._thread.join()

    def _beat(self) -> None:
        while not self._stop.wait(self.interval) and self._lost is None:
            self._run(renew=False)

    def _run(self, *, renew: bool) -> None:
        if self._verify is None or self._lost is not None:
            return
        with self._checking:
            try:
                self._verify(renew)
            except Exception as exc:  # OutputLockLost, the store gone, an I/O error: the lock is no longer certain
                self._mark(exc)

    def _mark(self, cause: BaseException) -> None:
        with self._guard:
            if self._lost is not None:
                return
            self._lost = OutputLockLost(lost_message(self.target, self.holder, cause))
            listeners, self._listeners = self._listeners, []
        log.error("%s", self._lost)
        for listener in listeners:
            listener()


def lost_message(target: object, holder: Mapping[str, Any], cause: BaseException) -> str:
    """What a batch that lost its output's lock says: why, that the output was not written, how to go on."""
    reason = str(cause).removeprefix(f"{target}: ")
    journal = f" ({holder['journal']})" if holder.get("journal") else ""
    return (
        f"{target}: this batch lost its lock on the output while it ran: {reason}. It stopped, and did not write "
        f"the output. The rows it completed are kept in its journal{journal}: run the same command again once "
        "the other batch has ended to resume them, or give this batch its own --output"
    )


async def while_held(hold: OutputHold, work: Awaitable[T]) -> T:
    """Await ``work`` (the batch's rows) while ``hold`` is held; once it is lost, cancel it (the
    journal keeps completed rows and marks the others interrupted) and raise :class:`OutputLockLost`."""
    loop = asyncio.get_running_loop()
    rows = asyncio.ensure_future(work)

    def cancel() -> None:
        with contextlib.suppress(RuntimeError):  # the loop has ended: nothing left to cancel
            loop.call_soon_threadsafe(rows.cancel)

    hold.on_lost(cancel)
    try:
        return await rows
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if hold.lost is None or (current is not None and current.cancelling()):
            raise  # cancelled from outside (Ctrl-C)
        raise hold.lost from None


@contextlib.contextmanager
def exclusive_url_output(
    target: UPath, holder: Mapping[str, Any], *, store_url: str | None = None, lease_seconds: float = LEASE_SECONDS,
    heartbeat_seconds: float = HEARTBEAT_SECONDS,
) -> Iterator[OutputHold]:  # fmt: skip
    """Hold the lock of the output ``target`` (a URL) for the block, watched (:class:`OutputHold`);
    :class:`~runner.errors.UsageError` naming the holder if another batch holds it. ``holder``
    (task, input, journal) is what the refused batch is told; the lock is in the store
    ``store_url`` when given, else next to the output."""
    record = {"pid": os.getpid(), "host": socket.gethostname(), **holder}
    if store_url:
        from runner.batch.output_lock_store import store_lock, verify

        record["token"] = uuid.uuid4().hex  # two holders' rows never read the same
        with store_lock(str(target), record, store_url, _now().isoformat()) as db:
            hold = OutputHold(target, holder, lambda renew: verify(db, str(target), record), heartbeat_seconds)
            with hold.watch():
                yield hold
        return
    from runner.batch.output_lock_object import object_lock

    with object_lock(target, record, lease_seconds) as lock:
        every = min(heartbeat_seconds, lease_seconds / 3)  # each beat renews the lease when a third of it is gone
        checking = f"checking the output lock {shown(lock.lock)}"  # bounded: a hung check would hold the batch for ever
        hold = OutputHold(target, holder, lambda renew: bounded(checking, lambda: lock.verify(renew=renew)), every)
        with hold.watch():
            yield hold


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)
