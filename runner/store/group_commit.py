"""Group commit: the writes of a batch's concurrent rows, one transaction per short window.

Outside a group every write to a :class:`~runner.store.database.Database` is its own
transaction, as before. Inside :func:`commit_group` (``run_batch`` opens one around its
workers) a write on the event loop's thread joins the group instead: the first opens a
transaction on its connection, later ones (from any row, on the batch's SQLite run store
and journal) run inside it, each :meth:`Database.atomic` unit in a savepoint of its own, so
a unit that fails undoes only itself. The group commits

* in the next turn of the event loop after someone waits for it (:func:`durable`: every row
  that reaches that point in the same turn shares one commit);
* after ``window`` seconds, or after ``max_writes`` writes, if nobody does;
* at once when :func:`commit_now` is called (a caller that cannot wait), and when the group ends.

What must be durable before something leaves the process waits for the commit that holds it:
a model call's reservation before its request is sent (``CallLedger.open_in_group``; a
caller that cannot wait, ``CallLedger.open``, commits at once), a row's ``running`` mark
before the row runs. Everything else (settlements, transcripts, step and run rows, a row's
outcome) rides with the next commit, so ``kill -9`` can lose only writes whose effects have
not left the process; a crash after a response came back and before its settlement
committed leaves the call ``reserved``, counted at its worst case on resume, as a crash
between the two did before.

The shared cap ledger (:class:`~runner.store.cap_ledger.CapLedger`) never joins: each of its
operations stays one short transaction, since a scope's row is what every worker waits on;
a settlement commits the group first, so the call's record is durable before its
reservation is settled.

Databases commit in :attr:`~runner.store.database.Database.commit_rank` order: the journal
(rank 1) after the run store and cap ledger (rank 0), so a row's outcome is never durable
before the records its run wrote. A commit that fails rolls back the rest of the group, fails
every waiter, and refuses every later write of the group (the batch stops; run it again to
resume). Writes from other threads (a tool running in a worker thread) do not join: they are
their own transactions, as outside a group. Only databases whose ``groupable`` is true join:
SQLite files. PostgreSQL connections do not yet (their writes stay one transaction each, as
before): a group's transaction there would hold row locks other workers wait on (a shared
transcript blob's insert) and lose its writes on a dropped connection, which the per-unit
retry with a ``check`` survives today.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from contextvars import ContextVar
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from runner.store.database import Database

WINDOW_SECONDS = 0.004
"""How long a group stays open when nobody waits for it."""
MAX_WRITES = 512
"""How many writes a group takes before it commits without waiting for the window."""

_CURRENT: ContextVar[CommitGroup | None] = ContextVar("runner_commit_group", default=None)


class GroupFailed(RuntimeError):
    """A group's commit failed earlier: its writes were rolled back, so nothing more may join it."""


class CommitGroup:
    """The open transactions of one batch's databases and the rows waiting for their commit."""

    def __init__(self, *, window: float = WINDOW_SECONDS, max_writes: int = MAX_WRITES) -> None:
        self.window, self.max_writes = window, max_writes
        self.commits = 0  # how many group commits ran (for tests and the benchmark)
        self._loop = asyncio.get_running_loop()
        self._thread = threading.get_ident()
        self._open: list[Database] = []
        self._waiters: list[asyncio.Future[None]] = []
        self._timer: asyncio.TimerHandle | None = None
        self._soon: asyncio.Handle | None = None
        self._writes = 0
        self._failed: BaseException | None = None

    def admits(self) -> bool:
        """Whether a write now joins this group (it is made on the group's event loop thread)."""
        return threading.get_ident() == self._thread

    def begin(self, db: Database) -> None:
        """Open ``db``'s transaction in the group (its caller holds ``db``'s lock)."""
        self.refuse_if_failed()
        if any(other.where == db.where for other in self._open):
            self.commit()  # another connection to the same file holds its write lock: release it first
        db._begin_group(self)
        self._open.append(db)
        if self._timer is None:
            self._timer = self._loop.call_later(self.window, self._commit_in_callback)

    def wrote(self) -> None:
        """Count one write (a statement or a unit); commit once there are ``max_writes``."""
        self._writes += 1
        if self._writes >= self.max_writes:
            self.commit()

    async def durable(self) -> None:
        """Return once every write made so far in the group is committed."""
        self.refuse_if_failed()
        if not self._open:
            return
        waiter = self._loop.create_future()
        self._waiters.append(waiter)
        if self._soon is None:
            self._soon = self._loop.call_soon(self._commit_in_callback)
        await waiter

    def commit(self) -> None:
        """Commit every open transaction of the group now, lowest rank first, and wake its waiters."""
        for handle in (self._timer, self._soon):
            if handle is not None:
                handle.cancel()
        self._timer = self._soon = None
        opened, self._open = sorted(self._open, key=lambda d: d.commit_rank), []
        waiters, self._waiters = self._waiters, []
        self._writes = 0
        error: BaseException | None = None
        for db in opened:
            if error is None:
                try:
                    db._end_group(commit=True)
                    continue
                except BaseException as exc:  # handed to every waiter, raised below
                    error = exc
            with contextlib.suppress(Exception):
                db._end_group(commit=False)
        if opened:
            self.commits += 1
        for waiter in waiters:
            if not waiter.done():
                if error is None:
                    waiter.set_result(None)
                else:
                    waiter.set_exception(GroupFailed(f"the batch's writes could not be committed: {error}"))
        if error is not None:
            self._failed = error
            raise error

    def _commit_in_callback(self) -> None:
        with contextlib.suppress(Exception):  # the waiters have the error; later writes are refused with it
            self.commit()

    def refuse_if_failed(self) -> None:
        """Raise :class:`GroupFailed` if a commit of this group failed."""
        if self._failed is not None:
            raise GroupFailed(f"an earlier commit of the batch's writes failed ({self._failed}); run the batch again to resume")


@contextlib.contextmanager
def commit_group(*, window: float = WINDOW_SECONDS, max_writes: int = MAX_WRITES) -> Iterator[CommitGroup]:
    """Group the writes made on this event loop's thread (and in the tasks it starts) until the
    block ends, when the last of them are committed. Call it inside a running event loop."""
    group = CommitGroup(window=window, max_writes=max_writes)
    token = _CURRENT.set(group)
    try:
        yield group
    except BaseException:
        _CURRENT.reset(token)
        group.commit()
        raise
    _CURRENT.reset(token)
    group.commit()
    group.refuse_if_failed()  # a commit that failed in a callback: the batch must not end as if it had not


def current_group() -> CommitGroup | None:
    """The group a write made here joins, if any."""
    group = _CURRENT.get()
    return group if group is not None and group.admits() else None


async def durable() -> None:
    """Wait until what this task wrote is committed (at once outside a group)."""
    group = current_group()
    if group is not None:
        await group.durable()


def commit_now() -> None:
    """Commit the current group now (for a caller that cannot wait; nothing outside a group)."""
    group = current_group()
    if group is not None:
        group.commit()
