"""A budget over time as a scope of the shared cap ledger: its current window.

A :class:`BudgetWindow` is one more :class:`~runner.caps.shared.SharedBudget` in a call's
chain of scopes, so a call reserves its worst case in it exactly as in a fan-out's batch
caps (one conditional ``UPDATE`` in the ledger, refused when ``spent + reserved + worst``
would pass the limit), with whichever other shared scope it falls in, on SQLite or
PostgreSQL. Its key is not fixed: each reservation goes to the window the clock is in when
it is made (:func:`runner.caps.windows.window_at`), and is settled in that same window, even
after it closed (a call in flight at midnight counts in the day it was reserved in).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Protocol

from runner.caps.budget import Budget, Estimate, Reservation
from runner.caps.shared import SharedBudget
from runner.caps.windows import Window, previous_window, window_at
from runner.config.budgets import BudgetSpec
from runner.config.specs import Caps, cap_figure
from runner.core.budget_warnings import BudgetWarning
from runner.core.usage import Usage
from runner.errors import CapReached

Clock = Callable[[], datetime]
_ATTEMPTS = 3


def utc_now() -> datetime:
    return datetime.now(UTC)


class WindowOpener(Protocol):
    """Creates a window's ledger scope with the budget's limits (raising them when the budget was raised)."""

    def __call__(self, key: str, caps: Caps) -> None: ...


def budget_caps(spec: BudgetSpec) -> Caps:
    """The caps of one window's scope: the budget's limits."""
    return Caps(max_cost_usd=spec.max_cost_usd, max_tokens=spec.max_tokens)


@dataclass
class BudgetWindow(SharedBudget):
    """Budget ``spec``'s current window (by ``clock``) in the ledger; ``key`` is the window
    of the latest reservation, each reservation remembers its own."""

    spec: BudgetSpec = field(kw_only=True)
    opener: WindowOpener = field(kw_only=True, repr=False)
    clock: Clock = field(kw_only=True, default=utc_now, repr=False)
    notice: Callable[[BudgetWarning], None] | None = field(kw_only=True, default=None, repr=False)
    """Told when a settlement here takes the window past one of ``spec.warn_at``."""
    _opened: set[str] = field(default_factory=set, repr=False)
    _keys: dict[str, str] = field(default_factory=dict, repr=False)
    _windows: dict[str, Window] = field(default_factory=dict, repr=False)  # each window reserved in, by key

    def current(self) -> Window:
        return window_at(self.spec, self.clock())

    def _window_key(self) -> str:
        window = self.current()
        if window.key not in self._opened:
            self.opener(window.key, self.caps)
            self._opened.add(window.key)
        self.key, self.scope = window.key, describe(self.spec, window)
        self._windows[window.key] = window
        return window.key

    def _hold(self, held: Reservation) -> None:
        key = self._window_key()
        owner = held.owner
        for _ in range(_ATTEMPTS):
            if self.ledger.reserve(
                key, held.usage, entry=held.id, owner=(owner.run_id, owner.attempt) if owner else None,
                spender=held.spender,
            ):
                self._keys[held.id] = key
                Budget._hold(self, held)
                return
            self._explain(key, held.estimate, held.count_step)
        raise self._refused_in(key, "max_cost_usd" if self.caps.max_cost_usd is not None else "max_tokens")

    def _give_back(self, held: Reservation, actual: Usage | None) -> None:
        key = self._keys.pop(held.id, None)
        if key is not None and (held.usage != Usage() or actual is not None):
            spend = self.ledger.settle(key, held.usage, actual, entry=held.id, spender=held.spender)
            if spend is not None and self.notice is not None:
                for warning in self._crossed(key, *spend):
                    self.notice(warning)
        Budget._give_back(self, held, actual)

    def _crossed(self, key: str, before: Usage, after: Usage) -> list[BudgetWarning]:
        """Each ``warn_at`` share this settlement took the window past: the share of the limit
        spent before it was below, after it is not. The ledger read both in the settlement's
        transaction, so of all the processes spending in the window exactly one sees each."""
        found = []
        for cap, limit in (("max_cost_usd", self.caps.max_cost_usd), ("max_tokens", self.caps.max_tokens)):
            if not limit:
                continue
            was, now = cap_figure(cap, before), cap_figure(cap, after)
            found += [
                BudgetWarning(self.spec.name, key, self.scope, cap, threshold, limit, now)
                for threshold in self.spec.warn_at
                if was / limit < threshold <= now / limit
            ]
        return found

    def degrading(self) -> Window | None:
        """The current window when this budget degrades (``on_exceed: degrade``) and that window's
        spend, as the ledger holds it now (every process's settled calls), has reached its threshold."""
        threshold = self.spec.degrade_at
        if threshold is None:
            return None
        window = self.current()
        try:
            spent, _ = self.ledger.figures(window.key)
        except KeyError:  # nobody has reserved in this window yet
            return None
        return window if any(figure / limit >= threshold for _, limit, figure in self._figures(spent)) else None

    def _figures(self, usage: Usage) -> list[tuple[str, float, float]]:
        """``(cap, limit, what usage counts of it)`` for each limit this budget has."""
        found = (
            ("max_cost_usd", self.caps.max_cost_usd, usage.cost_usd),
            ("max_tokens", self.caps.max_tokens, usage.input_tokens + usage.output_tokens),
        )
        return [(cap, float(limit), float(figure)) for cap, limit, figure in found if limit]

    def _take_over(self, run_id: str, recorded: Mapping[str, Usage | None]) -> Usage:
        window = self.current()
        total = Usage()
        for key in (previous_window(self.spec, window).key, self._window_key()):
            if key in self._opened or self._exists(key):
                total += self.ledger.take_over(key, run_id, recorded)
        return total

    def _exists(self, key: str) -> bool:
        try:
            self.ledger.figures(key)
        except KeyError:
            return False
        return True

    def _check_tool_call(self) -> None:
        """A budget does not count tool calls."""

    def _count_tool_call(self, count: int) -> None:
        Budget._count_tool_call(self, count)

    def _explain(self, key: str, estimate: Estimate, count_step: bool) -> None:
        spent, reserved = self.ledger.figures(key)
        try:
            Budget(self.caps, self.scope, spent=spent, _reserved=reserved)._check(estimate, False)
        except CapReached as refused:
            raise CapReached(
                refused.cap, refused.limit, refused.observed, refused.scope, next_call=refused.next_call,
                held=refused.held, budget=self.spec.name, reopens=self._reopens(key),
            ) from None

    def _refused_in(self, key: str, cap: str) -> CapReached:
        spent, _ = self.ledger.figures(key)
        limit = getattr(self.caps, cap)
        observed = round(cap_figure(cap, spent), 8)
        return CapReached(cap, limit if limit is not None else 0, observed, self.scope, budget=self.spec.name,
                          reopens=self._reopens(key))  # fmt: skip

    def _reopens(self, key: str) -> datetime | None:
        """When the window ``key`` ends (its next one opens), in the budget's time zone."""
        window = self._windows.get(key)
        return window.end if window is not None else None


def describe(spec: BudgetSpec, window: Window) -> str:
    """``budget 'daily' (day window 2026-12-02T00:00:00+01:00 .. 2026-12-03T00:00:00+01:00)``: a
    :class:`CapReached`'s scope, so the error names the budget and its window."""
    return f"budget '{spec.name}' ({spec.window_name} window {window.describe()})"


def degrading_budget(budget: Budget) -> tuple[BudgetSpec, Window] | None:
    """The first budget over time around ``budget`` (a call's scope) that is past its degrade
    threshold now (``on_exceed: degrade``), with its current window; ``None`` if there is none."""
    for scope in budget.chain():
        if isinstance(scope, BudgetWindow) and (window := scope.degrading()) is not None:
            return scope.spec, window
    return None
