"""A budget scope shared by many processes on many machines: the whole of a fanned-out batch.

A :class:`SharedBudget` is one more parent in a chain of :class:`~runner.caps.budget.Budget`
scopes, with the same contract: :meth:`~runner.caps.budget.Budget.reserve` holds a call's
worst case before it is sent, :meth:`~runner.caps.budget.Reservation.settle` replaces it by
what the call used. Its spend and reservations live in a database every worker reaches (a
:class:`ScopeLedger`, the run store's :class:`~runner.store.cap_ledger.CapLedger`): each
reservation is one atomic conditional ``UPDATE ... WHERE spent + reserved + worst <= cap``,
so shards on different workers cannot overshoot the cap together, whatever each one spends.

Only caps that add up over a batch live here (:data:`SHARED_CAPS`); a wall-clock cap stays
with each process. A worker that dies with calls in flight leaves their reservations held:
they keep counting at their worst case, as the run store counts them for the run.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import ClassVar, Protocol

from runner.caps.budget import Budget, Estimate, held_usage
from runner.config.specs import SUMMED_CAPS, Caps
from runner.core.usage import Usage
from runner.errors import CapReached

SHARED_CAPS = SUMMED_CAPS
"""Caps that add up over a batch: what a shared scope holds across workers."""
_ATTEMPTS = 3


class ScopeLedger(Protocol):
    """Where a shared scope's figures live; every method is one atomic statement."""

    def reserve(self, key: str, held: Usage) -> bool:
        """Add ``held`` to the scope's reservations if every cap still allows it (see
        :meth:`Budget._check <runner.caps.budget.Budget._check>` for the rule); ``False`` if not."""

    def settle(self, key: str, held: Usage, actual: Usage | None) -> None:
        """Remove ``held`` from the reservations and add ``actual`` to the spend."""

    def count_tool_call(self, key: str, count: int) -> bool:
        """Add ``count`` tool calls unless that exceeds ``max_tool_calls``; ``False`` if it would."""

    def figures(self, key: str) -> tuple[Usage, Usage]:
        """``(spent, reserved)`` as the database holds them now."""


def shared_caps(caps: Caps) -> Caps:
    """The part of ``caps`` a shared scope holds (:data:`SHARED_CAPS`)."""
    return Caps(**{name: getattr(caps, name) for name in SHARED_CAPS})


def local_caps(caps: Caps) -> Caps:
    """The part of ``caps`` each process keeps (everything but :data:`SHARED_CAPS`)."""
    return replace(caps, **dict.fromkeys(SHARED_CAPS))


@dataclass
class SharedBudget(Budget):
    """A budget scope whose spend and reservations are ``ledger``'s scope ``key``.

    Its own ``spent`` counts what this process added (for progress lines); the caps are
    enforced on the ledger's figures, which cover every process.
    """

    ledger: ScopeLedger = field(kw_only=True, repr=False)
    key: str = field(kw_only=True)
    outlives_process: ClassVar[bool] = True

    def __post_init__(self) -> None:
        unshared = [f.name for f in fields(Caps) if f.name not in SHARED_CAPS and getattr(self.caps, f.name) is not None]
        if unshared:
            raise ValueError(f"a shared scope holds only {', '.join(SHARED_CAPS)}; not {', '.join(unshared)}")

    def _check(self, estimate: Estimate, count_step: bool) -> None:
        """Nothing here: the ledger checks and holds in one statement (:meth:`_hold`)."""

    def _hold(self, estimate: Estimate, count_step: bool) -> None:
        held = held_usage(estimate, count_step)
        for _ in range(_ATTEMPTS):
            if self.ledger.reserve(self.key, held):
                super()._hold(estimate, count_step)
                return
            self._explain_refusal(estimate, count_step)
        raise self._refused("max_cost_usd" if self.caps.max_cost_usd is not None else _first_cap(self.caps))

    def _give_back(self, estimate: Estimate, count_step: bool, actual: Usage | None) -> None:
        held = held_usage(estimate, count_step)
        if held != Usage() or actual is not None:
            self.ledger.settle(self.key, held, actual)
        super()._give_back(estimate, count_step, actual)

    def _check_tool_call(self) -> None:
        """Nothing here: the ledger checks and counts in one statement (:meth:`_count_tool_call`)."""

    def _count_tool_call(self, count: int) -> None:
        if not self.ledger.count_tool_call(self.key, count):
            raise self._refused("max_tool_calls")
        super()._count_tool_call(count)

    def _explain_refusal(self, estimate: Estimate, count_step: bool) -> None:
        """Raise the ``CapReached`` the ledger's figures call for; return if they now allow the call
        (another worker settled in between), so the caller tries again."""
        spent, reserved = self.ledger.figures(self.key)
        Budget(self.caps, self.scope, spent=spent, _reserved=reserved)._check(estimate, count_step)

    def _refused(self, cap: str) -> CapReached:
        spent, _ = self.ledger.figures(self.key)
        limit = getattr(self.caps, cap)
        observed = {"max_tool_calls": spent.tool_calls, "max_steps": spent.model_calls, "max_cost_usd": spent.cost_usd,
                    "max_input_tokens": spent.input_tokens, "max_output_tokens": spent.output_tokens,
                    "max_tokens": spent.total_tokens}[cap]  # fmt: skip
        return CapReached(cap, limit if limit is not None else 0, round(observed, 8), self.scope)


def _first_cap(caps: Caps) -> str:
    return next((name for name in SHARED_CAPS if getattr(caps, name) is not None), "max_cost_usd")
