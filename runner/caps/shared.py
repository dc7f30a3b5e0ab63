"""A budget scope shared by many processes on many machines: the whole of a fanned-out batch.

A :class:`SharedBudget` is one more parent in a chain of :class:`~runner.caps.budget.Budget`
scopes, with the same contract: :meth:`~runner.caps.budget.Budget.reserve` holds a call's
worst case before it is sent, :meth:`~runner.caps.budget.Reservation.settle` replaces it by
what the call used. Its spend and reservations live in a database every worker reaches (a
:class:`ScopeLedger`, the run store's :class:`~runner.store.cap_ledger.CapLedger`): each
reservation is one atomic conditional ``UPDATE ... WHERE spent + reserved + worst <= cap``,
so shards on different workers cannot overshoot the cap together, whatever each one spends.

Only caps that add up over a batch live here (:data:`SHARED_CAPS`); a wall-clock cap stays
with each process.

A worker that dies with calls in flight leaves their reservations held: the endpoint may
have billed those calls, so they keep counting at their worst case (as the run store counts
them for the run) until something knows better. Each reservation names its holder (the
process) and its owner (the run and attempt); when a run resumes after its worker died,
:meth:`~runner.caps.budget.Budget.take_over` carries what the dead worker held for it
forward as spend, once, instead of leaving it held beside the new attempt's reservations.
What dead workers still hold is reported (the ledger's ``held_by_dead``).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import ClassVar, Protocol

from runner.caps.budget import Budget, Estimate, Reservation
from runner.config.specs import SUMMED_CAPS, Caps, cap_figure
from runner.core.spender import Spender
from runner.core.usage import Usage
from runner.errors import CapReached

SHARED_CAPS = SUMMED_CAPS
"""Caps that add up over a batch: what a shared scope holds across workers."""
_ATTEMPTS = 3


class ScopeLedger(Protocol):
    """Where a shared scope's figures live; every method is atomic, and applied once per
    ``entry`` (a reservation's id) however often it is sent."""

    def reserve(
        self, key: str, held: Usage, *, entry: str | None = None, owner: tuple[str, int] | None = None,
        spender: Spender | None = None,
    ) -> bool:
        """Add ``held`` to the scope's reservations if every cap still allows it (see
        :meth:`Budget._check <runner.caps.budget.Budget._check>` for the rule), as reservation
        ``entry`` of ``owner`` (run id, attempt) for ``spender``; ``False`` if not."""

    def settle(
        self, key: str, held: Usage, actual: Usage | None, *, entry: str | None = None, spender: Spender | None = None
    ) -> tuple[Usage, Usage] | None:
        """Remove reservation ``entry`` (``held``) from the reservations and add ``actual`` to the
        spend (``spender``: whose it is, should nothing have been held); the scope's spend just
        before and after (``None``: nothing applied, settled before)."""

    def count_tool_call(self, key: str, count: int, *, entry: str | None = None) -> bool:
        """Add ``count`` tool calls unless that exceeds ``max_tool_calls``; ``False`` if it would."""

    def take_over(self, key: str, run_id: str, recorded: Mapping[str, Usage | None] | None = None) -> Usage:
        """Carry forward what dead holders hold for run ``run_id`` (held -> spent at its worst case,
        or at what the run store ``recorded`` for that reservation)."""

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

    def _hold(self, held: Reservation) -> None:
        owner = held.owner
        for _ in range(_ATTEMPTS):
            if self.ledger.reserve(
                self.key, held.usage, entry=held.id, owner=(owner.run_id, owner.attempt) if owner else None,
                spender=held.spender,
            ):
                super()._hold(held)
                return
            self._explain_refusal(held.estimate, held.count_step)
        raise self._refused("max_cost_usd" if self.caps.max_cost_usd is not None else _first_cap(self.caps))

    def _give_back(self, held: Reservation, actual: Usage | None) -> None:
        if held.usage != Usage() or actual is not None:
            self.ledger.settle(self.key, held.usage, actual, entry=held.id, spender=held.spender)
        super()._give_back(held, actual)

    def _take_over(self, run_id: str, recorded: Mapping[str, Usage | None]) -> Usage:
        return self.ledger.take_over(self.key, run_id, recorded)

    def _check_tool_call(self) -> None:
        """Nothing here: the ledger checks and counts in one statement (:meth:`_count_tool_call`)."""

    def _count_tool_call(self, count: int) -> None:
        if not self.ledger.count_tool_call(self.key, count, entry=uuid.uuid4().hex):
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
        return CapReached(cap, limit if limit is not None else 0, round(cap_figure(cap, spent), 8), self.scope)


def _first_cap(caps: Caps) -> str:
    return next((name for name in SHARED_CAPS if getattr(caps, name) is not None), "max_cost_usd")
