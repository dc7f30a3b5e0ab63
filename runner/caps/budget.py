"""Budgets: limits kept apart from accumulated usage, checked before every model call.

A :class:`Budget` holds the limits of one scope (an agent run, a pipeline step, a task, a
whole batch) and what that scope has spent. Budgets nest: a step's budget has the task's as
parent, a batch row's run has the batch's. :meth:`Budget.reserve` checks the worst case of
the next call against every enclosing scope *before* it is sent, and holds that amount
until :meth:`Reservation.settle` replaces it with the real usage. Concurrent runs that share a
parent therefore cannot overshoot it together.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from runner.config.specs import Caps, cap_figure
from runner.core.spender import Spender
from runner.core.usage import Usage
from runner.errors import CapReached


@dataclass(frozen=True)
class Estimate:
    """The worst case of one model call, reserved before it is sent."""

    input_tokens: int
    output_tokens: int
    cost_usd: float


@dataclass(frozen=True)
class Owner:
    """Whose calls a scope's reservations are: a run and its attempt (and the run's task). A
    shared scope records it with each reservation, so the run's next attempt can take over what
    a dead worker held, and its spend can be told by task (:class:`~runner.core.spender.Spender`)."""

    run_id: str
    attempt: int = 1
    task: str | None = None


@dataclass
class Budget:
    """Limits and spend of one scope, with an optional enclosing scope."""

    caps: Caps
    scope: str = "run"
    parent: Budget | None = None
    spent: Usage = field(default_factory=Usage)
    started: float = field(default_factory=time.monotonic)
    _reserved: Usage = field(default_factory=Usage)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    owner: Owner | None = None  # the run whose calls reserve here (set on a run's own scope)
    outlives_process: ClassVar[bool] = False
    """Whether this scope's figures are kept outside the process (a shared scope's ledger)."""

    def child(self, caps: Caps, scope: str, *, owner: Owner | None = None) -> Budget:
        """A nested scope whose spending also counts here (``owner``: the run it is the scope of)."""
        return Budget(caps=caps, scope=scope, parent=self, owner=owner)

    def calls_owner(self) -> Owner | None:
        """The run whose calls this scope reserves for: its own owner or the nearest enclosing one."""
        return next((b.owner for b in self.chain() if b.owner is not None), None)

    def take_over(self, run_id: str, recorded: Mapping[str, Usage | None] | None = None) -> Usage:
        """Run ``run_id`` resumes after its worker died: what that worker still holds for it in
        scopes kept outside the process is carried forward (counted as spent at its worst case,
        once) rather than left held beside the new attempt's reservations. A reservation whose
        call the run store ``recorded`` (by reservation id: what it used, ``None`` for not
        billed) is settled to that instead. Returns what was counted."""
        return sum((budget._take_over(run_id, recorded or {}) for budget in self.chain()), Usage())

    def chain(self) -> list[Budget]:
        out: list[Budget] = []
        node: Budget | None = self
        while node is not None:
            out.append(node)
            node = node.parent
        return out

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def count_from(self, seconds_ago: float) -> None:
        """Start this scope's wall clock ``seconds_ago`` (a resumed run or batch counts from its
        first attempt, not the latest)."""
        self.started = time.monotonic() - max(seconds_ago, 0.0)

    def deadline(self) -> Deadline | None:
        """The earliest wall-clock deadline of this scope and the scopes around it."""
        found = [
            Deadline(b.started + b.caps.max_wall_seconds, b) for b in self.chain() if b.caps.max_wall_seconds is not None
        ]
        return min(found, key=lambda d: d.at) if found else None

    def check_can_start(self) -> None:
        """Raise :class:`CapReached` if any scope is already exhausted (no estimate needed)."""
        self.reserve(Estimate(0, 0, 0.0), count_step=False).release()

    def reserve(self, estimate: Estimate, *, count_step: bool = True, caller: Spender | None = None) -> Reservation:
        """Reserve one model call's worst case in every scope, or raise ``CapReached``
        (``caller``: the call's agent and model, recorded where a scope keeps its entries)."""
        reservation = Reservation(self, estimate, count_step, caller=caller or Spender())
        chain = self.chain()
        with _locked(chain):
            for budget in chain:
                budget._check(estimate, count_step)
            held: list[Budget] = []
            try:  # outermost first: a shared scope (one database round trip) refuses before anything is held here
                for budget in reversed(chain):
                    budget._hold(reservation)
                    held.append(budget)
            except CapReached:
                for budget in held:
                    budget._give_back(reservation, None)
                raise
        return reservation

    def take_tool_call(self) -> None:
        """Count one tool call in every scope, or raise ``CapReached`` (counting nothing) if
        it would exceed a tool-call cap. Check and count are one step, so concurrent steps
        sharing a budget cannot both take the last call."""
        chain = self.chain()
        with _locked(chain):
            for budget in chain:
                budget._check_tool_call()
            counted: list[Budget] = []
            try:
                for budget in reversed(chain):
                    budget._count_tool_call(1)
                    counted.append(budget)
            except CapReached:
                for budget in counted:
                    budget._count_tool_call(-1)
                raise

    # --- one scope's part (a subclass keeps its figures elsewhere; see runner.caps.shared) ---

    def _hold(self, held: Reservation) -> None:
        """Hold ``held``'s worst case here (the caller holds this scope's lock and has checked it)."""
        self._reserved += held.usage

    def _give_back(self, held: Reservation, actual: Usage | None) -> None:
        """Release what :meth:`_hold` held and count ``actual`` (caller holds the lock)."""
        self._reserved -= held.usage
        if actual is not None:
            self.spent += actual

    def _take_over(self, run_id: str, recorded: Mapping[str, Usage | None]) -> Usage:
        """What this scope carried forward for ``run_id`` (see :meth:`take_over`): nothing in memory."""
        return Usage()

    def _check_tool_call(self) -> None:
        limit = self.caps.max_tool_calls
        if limit is not None and self.spent.tool_calls + 1 > limit:
            raise CapReached("max_tool_calls", limit, self.spent.tool_calls, self.scope)

    def _count_tool_call(self, count: int) -> None:
        self.spent += Usage(tool_calls=count)

    def _check(self, estimate: Estimate, count_step: bool) -> None:
        caps, spent, held = self.caps, self.spent, self._reserved
        checks: list[tuple[str, float | None, float, float]] = [
            ("max_steps", caps.max_steps, spent.model_calls + held.model_calls, int(count_step)),
            ("max_input_tokens", caps.max_input_tokens, spent.input_tokens + held.input_tokens, estimate.input_tokens),
            ("max_output_tokens", caps.max_output_tokens, spent.output_tokens + held.output_tokens, estimate.output_tokens),
            (
                "max_tokens",
                caps.max_tokens,
                spent.total_tokens + held.input_tokens + held.output_tokens,
                estimate.input_tokens + estimate.output_tokens,
            ),
            ("max_cost_usd", caps.max_cost_usd, spent.cost_usd + held.cost_usd, estimate.cost_usd),
        ]
        for name, limit, used, extra in checks:
            if limit is None:
                continue
            if used >= limit and (extra or name != "max_steps"):
                raise CapReached(name, limit, _observed(name, spent), self.scope)
            if used + extra > limit and name != "max_steps":  # not reached: the next call's worst case would pass it
                observed = _observed(name, spent)
                raise CapReached(name, limit, observed, self.scope, next_call=round(extra, 8),
                                 held=round(used - observed, 8))
            if used + extra > limit:
                raise CapReached(name, limit, _observed(name, spent), self.scope)
        if caps.max_wall_seconds is not None and self.elapsed() >= caps.max_wall_seconds:
            raise CapReached("max_wall_seconds", caps.max_wall_seconds, round(self.elapsed(), 3), self.scope)

    def _settle(self, held: Reservation, actual: Usage | None) -> None:
        for budget in self.chain():
            with budget._lock:
                budget._give_back(held, actual)

    def add_spend(self, actual: Usage, *, local: bool = False) -> None:
        """Count spend that happened elsewhere: in every enclosing scope, or with ``local``
        only here (a resumed run's earlier attempts, already counted by its parents). A
        scope whose figures outlive the process (``outlives_process``) saw that spend when it
        happened and is left alone."""
        for budget in [self] if local else self.chain():
            if budget.outlives_process:
                continue
            with budget._lock:
                budget.spent += actual


@dataclass(frozen=True)
class Deadline:
    """When (``time.monotonic()``) a scope's ``max_wall_seconds`` runs out."""

    at: float
    budget: Budget

    def reached(self) -> CapReached:
        caps = self.budget.caps
        assert caps.max_wall_seconds is not None
        return CapReached("max_wall_seconds", caps.max_wall_seconds, round(self.budget.elapsed(), 3), self.budget.scope)


@contextlib.asynccontextmanager
async def within_deadline(budget: Budget) -> AsyncIterator[None]:
    """Cancel what runs inside at the earliest ``max_wall_seconds`` of ``budget``'s scopes and
    raise ``CapReached``: a hung call, its retries and their backoff end at the cap, not after."""
    deadline = budget.deadline()
    if deadline is None:
        yield
        return
    timeout = asyncio.timeout_at(deadline.at)  # the event loop's clock is time.monotonic()
    try:
        async with timeout:
            yield
    except TimeoutError:
        if timeout.expired():
            raise deadline.reached() from None
        raise


@contextlib.contextmanager
def _locked(chain: list[Budget]) -> Iterator[None]:
    """Every scope's lock, always taken innermost first (so two chains never deadlock)."""
    for budget in chain:
        budget._lock.acquire()
    try:
        yield
    finally:
        for budget in reversed(chain):
            budget._lock.release()


def held_usage(estimate: Estimate, count_step: bool) -> Usage:
    """What a reservation holds in each scope until it is settled."""
    return Usage(estimate.input_tokens, estimate.output_tokens, 0, estimate.cost_usd, int(count_step))


def _observed(name: str, spent: Usage) -> float:
    return round(cap_figure(name, spent), 8)


@dataclass
class Reservation:
    """A held worst-case amount; settle it with the real usage, or release it.

    ``id`` names it where a scope keeps it outside the process (a shared scope's ledger
    entry), so settling it twice, or again after a dropped connection, counts it once.
    """

    budget: Budget
    estimate: Estimate
    count_step: bool
    done: bool = False
    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    caller: Spender = field(default_factory=Spender)  # the call's agent and model

    @property
    def usage(self) -> Usage:
        """What it holds in each scope until it is settled."""
        return held_usage(self.estimate, self.count_step)

    @property
    def owner(self) -> Owner | None:
        """The run whose call this is (see :meth:`Budget.calls_owner`)."""
        return self.budget.calls_owner()

    @property
    def spender(self) -> Spender:
        """Who the call's spend counts for: its caller's agent and model, its owner's task."""
        owner = self.owner
        return Spender(owner.task if owner is not None else None, self.caller.agent, self.caller.model)

    def settle(self, actual: Usage, *, step: bool = True) -> None:
        """Replace the held worst case by what the call used (tokens and priced cost; the
        model call itself is counted here, as a step, unless ``step`` is false: an attempt
        the client retries is billed but is not a step of its own, the retry is)."""
        if self.done:
            return
        self.done = True
        self.budget._settle(self, actual + Usage(model_calls=int(self.count_step and step)))

    def release(self) -> None:
        """Give the reservation back without spending (the call was not made)."""
        if not self.done:
            self.done = True
            self.budget._settle(self, None)
