"""Budgets: limits kept apart from accumulated usage, checked before every model call.

A :class:`Budget` holds the limits of one scope (an agent run, a pipeline step, a task, a
whole batch) and what that scope has spent. Budgets nest: a step's budget has the task's as
parent, a batch row's run has the batch's. :meth:`Budget.reserve` checks the worst case of
the next call against every enclosing scope *before* it is sent, and holds that amount
until :meth:`Reservation.settle` replaces it with the real usage. Concurrent runs that share a
parent therefore cannot overshoot it together.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from runner.config.specs import Caps
from runner.errors import CapReached


@dataclass
class Spend:
    """What a scope has used so far."""

    steps: int = 0
    tool_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    cost_usd: float = 0.0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def as_dict(self) -> dict[str, float]:
        return {
            "steps": self.steps,
            "tool_calls": self.tool_calls,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cached_input_tokens": self.cached_input_tokens,
            "total_tokens": self.total_tokens,
            "cost_usd": round(self.cost_usd, 8),
        }


@dataclass(frozen=True)
class Estimate:
    """The worst case of one model call, reserved before it is sent."""

    input_tokens: int
    output_tokens: int
    cost_usd: float


@dataclass
class Budget:
    """Limits and spend of one scope, with an optional enclosing scope."""

    caps: Caps
    scope: str = "run"
    parent: Budget | None = None
    spent: Spend = field(default_factory=Spend)
    started: float = field(default_factory=time.monotonic)
    _reserved: Spend = field(default_factory=Spend)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def child(self, caps: Caps, scope: str) -> Budget:
        """A nested scope whose spending also counts here."""
        return Budget(caps=caps, scope=scope, parent=self)

    def chain(self) -> list[Budget]:
        out: list[Budget] = []
        node: Budget | None = self
        while node is not None:
            out.append(node)
            node = node.parent
        return out

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def check_can_start(self) -> None:
        """Raise :class:`CapReached` if any scope is already exhausted (no estimate needed)."""
        self.reserve(Estimate(0, 0, 0.0), count_step=False).release()

    def reserve(self, estimate: Estimate, *, count_step: bool = True) -> Reservation:
        """Reserve one model call's worst case in every scope, or raise ``CapReached``."""
        chain = self.chain()
        for budget in chain:
            budget._lock.acquire()
        try:
            for budget in chain:
                budget._check(estimate, count_step)
            for budget in chain:
                budget._reserved.steps += int(count_step)
                budget._reserved.input_tokens += estimate.input_tokens
                budget._reserved.output_tokens += estimate.output_tokens
                budget._reserved.cost_usd += estimate.cost_usd
        finally:
            for budget in reversed(chain):
                budget._lock.release()
        return Reservation(self, estimate, count_step)

    def take_tool_call(self) -> None:
        """Count one tool call in every scope, or raise ``CapReached`` (counting nothing) if
        it would exceed a tool-call cap. Check and count are one step, so concurrent steps
        sharing a budget cannot both take the last call."""
        chain = self.chain()
        for budget in chain:
            budget._lock.acquire()
        try:
            for budget in chain:
                limit = budget.caps.max_tool_calls
                if limit is not None and budget.spent.tool_calls + 1 > limit:
                    raise CapReached("max_tool_calls", limit, budget.spent.tool_calls, budget.scope)
            for budget in chain:
                budget.spent.tool_calls += 1
        finally:
            for budget in reversed(chain):
                budget._lock.release()

    def _check(self, estimate: Estimate, count_step: bool) -> None:
        caps, spent, held = self.caps, self.spent, self._reserved
        checks: list[tuple[str, float | None, float, float]] = [
            ("max_steps", caps.max_steps, spent.steps + held.steps, int(count_step)),
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
            if limit is not None and (used + extra > limit or (extra == 0 and used >= limit and name != "max_steps")):
                raise CapReached(name, limit, _observed(name, spent), self.scope)
        if caps.max_wall_seconds is not None and self.elapsed() >= caps.max_wall_seconds:
            raise CapReached("max_wall_seconds", caps.max_wall_seconds, round(self.elapsed(), 3), self.scope)

    def _settle(self, estimate: Estimate, count_step: bool, actual: Spend | None) -> None:
        for budget in self.chain():
            with budget._lock:
                held = budget._reserved
                held.steps -= int(count_step)
                held.input_tokens -= estimate.input_tokens
                held.output_tokens -= estimate.output_tokens
                held.cost_usd -= estimate.cost_usd
                if actual is not None:
                    s = budget.spent
                    s.steps += actual.steps
                    s.input_tokens += actual.input_tokens
                    s.output_tokens += actual.output_tokens
                    s.cached_input_tokens += actual.cached_input_tokens
                    s.cost_usd += actual.cost_usd

    def add_spend(self, actual: Spend, *, local: bool = False) -> None:
        """Count spend that happened elsewhere: in every enclosing scope, or with ``local``
        only here (a resumed run's earlier attempts, already counted by its parents)."""
        if not local:
            self._settle(Estimate(0, 0, 0.0), False, actual)
            return
        with self._lock:
            s = self.spent
            s.steps += actual.steps
            s.tool_calls += actual.tool_calls
            s.input_tokens += actual.input_tokens
            s.output_tokens += actual.output_tokens
            s.cached_input_tokens += actual.cached_input_tokens
            s.cost_usd += actual.cost_usd


def _observed(name: str, spent: Spend) -> float:
    return {
        "max_steps": spent.steps,
        "max_input_tokens": spent.input_tokens,
        "max_output_tokens": spent.output_tokens,
        "max_tokens": spent.total_tokens,
        "max_cost_usd": round(spent.cost_usd, 8),
    }[name]


@dataclass
class Reservation:
    """A held worst-case amount; settle it with the real usage, or release it."""

    budget: Budget
    estimate: Estimate
    count_step: bool
    done: bool = False

    def settle(self, input_tokens: int, output_tokens: int, cached_input_tokens: int, cost_usd: float) -> None:
        if self.done:
            return
        self.done = True
        actual = Spend(int(self.count_step), 0, input_tokens, output_tokens, cached_input_tokens, cost_usd)
        self.budget._settle(self.estimate, self.count_step, actual)

    def release(self) -> None:
        """Give the reservation back without spending (the call was not made)."""
        if not self.done:
            self.done = True
            self.budget._settle(self.estimate, self.count_step, None)
