"""A budget's windows in the shared cap ledger, with a fixed clock: a Berlin month rolls over
at local midnight of the 1st, a call reserved before and settled after the rollover counts in
the old window, a reached window refuses (naming budget, window, limit and spend), and a
raised limit lets the window's calls through again. Real SQLite (and PostgreSQL) ledgers."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from runner.caps.budget import Budget, Estimate, Owner
from runner.caps.windows import window_at
from runner.config.budgets import BudgetSpec
from runner.config.specs import Caps
from runner.core.usage import Usage
from runner.errors import CapReached
from runner.runs.budget_scopes import window_scope
from runner.store.cap_ledger import CapLedger
from runner.store.connect import open_database

MONTH = BudgetSpec("monthly", "month", max_cost_usd=1.0, timezone="Europe/Berlin")
NOVEMBER = "budget:monthly:2026-11-01T00:00:00+01:00"
DECEMBER = "budget:monthly:2026-12-01T00:00:00+01:00"


class Clock:
    """A clock the test moves by hand."""

    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def ledger(store_target: str | Path) -> Iterator[CapLedger]:
    opened = CapLedger(open_database(store_target))
    yield opened
    opened.close()


def run_in(ledger: CapLedger, spec: BudgetSpec, clock: Clock, run_id: str = "run-1") -> Budget:
    return window_scope(spec, ledger, None, clock).child(Caps(), "task", owner=Owner(run_id))


def test_windows_start_at_local_midnight() -> None:
    last_second = datetime(2026, 11, 30, 22, 59, 59, tzinfo=UTC)  # 23:59:59 in Berlin (CET)
    assert window_at(MONTH, last_second).key == NOVEMBER
    assert window_at(MONTH, last_second + timedelta(seconds=1)).key == DECEMBER
    summer = BudgetSpec("d", "day", 1.0, timezone="Europe/Berlin")
    assert window_at(summer, datetime(2026, 7, 1, 21, 59, tzinfo=UTC)).key == "budget:d:2026-07-01T00:00:00+02:00"
    assert window_at(summer, datetime(2026, 7, 1, 22, 0, tzinfo=UTC)).key == "budget:d:2026-07-02T00:00:00+02:00"
    week = BudgetSpec("w", "week", 1.0)
    assert window_at(week, datetime(2026, 12, 2, 5, 0, tzinfo=UTC)).start == datetime(
        2026, 11, 30, tzinfo=UTC
    )  # a Monday
    bucket = BudgetSpec("h", 6, 1.0)
    found = window_at(bucket, datetime(2026, 12, 2, 5, 59, tzinfo=UTC))
    assert (found.start, found.end) == (datetime(2026, 12, 2, tzinfo=UTC), datetime(2026, 12, 2, 6, tzinfo=UTC))


def test_a_berlin_month_rolls_over_at_local_midnight_and_calls_in_flight_stay_in_their_window(
    ledger: CapLedger,
) -> None:
    clock = Clock(datetime(2026, 11, 30, 22, 59, 30, tzinfo=UTC))  # 23:59:30 on 30 November in Berlin
    run = run_in(ledger, MONTH, clock)
    run.reserve(Estimate(100, 50, 0.5)).settle(Usage(80, 20, 0, 0.4))
    in_flight = run.reserve(Estimate(100, 50, 0.5))  # reserved in November...
    with pytest.raises(CapReached) as refused:
        run.reserve(Estimate(100, 50, 0.2))  # 0.4 spent + 0.5 held + 0.2 > 1.0
    assert (
        refused.value.cap == "max_cost_usd"
        and refused.value.limit == 1.0
        and refused.value.observed == pytest.approx(0.4)
    )
    assert "budget 'monthly' (month window 2026-11-01T00:00:00+01:00 .. 2026-12-01T00:00:00+01:00)" in str(
        refused.value
    )
    assert refused.value.budget == "monthly" and refused.value.reopens == datetime(2026, 12, 1, tzinfo=ZoneInfo("Europe/Berlin"))
    assert str(refused.value).endswith("; the window reopens at 2026-12-01T00:00:00+01:00")

    clock.now = datetime(2026, 11, 30, 23, 0, 0, tzinfo=UTC)  # midnight of 1 December in Berlin
    december = run.reserve(Estimate(100, 50, 0.7))  # a new window: November's spend does not count
    in_flight.settle(Usage(90, 30, 0, 0.45))  # ...and settled in December: it counts in November

    spent, reserved = ledger.figures(NOVEMBER)
    assert spent.cost_usd == pytest.approx(0.85) and spent.model_calls == 2 and reserved == Usage()
    spent, reserved = ledger.figures(DECEMBER)
    assert spent == Usage() and reserved.cost_usd == pytest.approx(0.7)
    december.settle(Usage(10, 10, 0, 0.1))
    assert ledger.figures(DECEMBER)[0].cost_usd == pytest.approx(0.1)
    assert ledger.scope(DECEMBER).caps == Caps(max_cost_usd=1.0)


def test_two_scopes_of_one_window_share_it_and_a_raised_limit_reopens_it(ledger: CapLedger) -> None:
    clock = Clock(datetime(2026, 12, 2, 12, 0, tzinfo=UTC))
    daily = BudgetSpec("daily", "day", max_cost_usd=0.5)
    first, second = run_in(ledger, daily, clock, "run-a"), run_in(ledger, daily, clock, "run-b")
    first.reserve(Estimate(10, 10, 0.3))
    with pytest.raises(CapReached):
        second.reserve(Estimate(10, 10, 0.3))  # the other run's reservation counts: one window, one ledger scope
    raised = run_in(ledger, BudgetSpec("daily", "day", max_cost_usd=1.0), clock, "run-c")
    raised.reserve(Estimate(10, 10, 0.3))  # the budget was raised: its window takes the new limit
    assert ledger.scope("budget:daily:2026-12-02T00:00:00+00:00").caps == Caps(max_cost_usd=1.0)


def test_a_token_budget_counts_prompt_and_completion_tokens(ledger: CapLedger) -> None:
    clock = Clock(datetime(2026, 12, 2, 12, 0, tzinfo=UTC))
    run = run_in(ledger, BudgetSpec("tokens", 24, max_tokens=1000), clock)
    run.reserve(Estimate(400, 100, 0.0)).settle(Usage(300, 100, 0, 0.0))
    run.reserve(Estimate(400, 100, 0.0)).settle(Usage(300, 100, 0, 0.0))
    with pytest.raises(CapReached) as refused:
        run.reserve(Estimate(400, 100, 0.0))
    assert refused.value.cap == "max_tokens" and refused.value.observed == 800
    assert str(refused.value).endswith("; the window reopens at 2026-12-03T00:00:00+00:00")  # a 24-hour bucket, in UTC
    run.check_can_start()  # 800 of 1000: a row may still start


def test_a_degrading_budget_is_past_its_threshold_from_the_ledgers_figures_until_the_window_ends(ledger: CapLedger) -> None:
    from runner.caps.budget_windows import degrading_budget

    spec = BudgetSpec("daily", "day", max_cost_usd=1.0, warn_at=(0.8, 0.95), on_exceed="degrade")
    clock = Clock(datetime(2026, 12, 2, 12, 0, tzinfo=UTC))
    run = run_in(ledger, spec, clock)
    assert degrading_budget(run) is None  # nobody has reserved in the window yet
    run.reserve(Estimate(100, 50, 0.5)).settle(Usage(80, 20, 0, 0.79))
    held = run.reserve(Estimate(100, 50, 0.1))
    assert degrading_budget(run) is None  # held is not spent: 79% of the limit
    elsewhere = run_in(ledger, spec, clock, "run-2")  # another run (or process) on the same ledger
    elsewhere.reserve(Estimate(10, 5, 0.05)).settle(Usage(10, 5, 0, 0.01))
    found = degrading_budget(run)  # this run settled nothing more, the ledger says 80%
    assert found is not None and found[0] is spec and found[1].key == "budget:daily:2026-12-02T00:00:00+00:00"
    held.settle(Usage(10, 5, 0, 0.05))
    stopping = BudgetSpec("daily", "day", max_cost_usd=1.0, warn_at=(0.8,))  # on_exceed: stop never degrades
    assert degrading_budget(run_in(ledger, stopping, clock, "run-3")) is None
    clock.now = datetime(2026, 12, 3, 0, 0, tzinfo=UTC)  # the next day's window
    assert degrading_budget(run) is None
