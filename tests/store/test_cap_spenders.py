"""Who spent in a shared cap scope: each ledger entry records its call's task, agent and model
with its hold, and a scope's entries summed by them add up to its figures: settled calls at
what they used, calls not billed not at all, calls in flight as reserved, and a killed
worker's calls (a real process, SIGKILLed) at their worst case once its run's next attempt
takes them over, or at what the run store recorded when settled dead. A ledger from before
spenders were recorded reads as an unknown spender, and gains the columns when opened. Both
backends."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from runner.caps.budget import Budget, Estimate, Owner, Reservation
from runner.caps.shared import SharedBudget
from runner.config.specs import Caps
from runner.core.spender import Spender
from runner.core.usage import Usage
from runner.store.cap_ledger import SCHEMA, CapLedger, dead_entries
from runner.store.cap_spenders import SpenderFigures, spenders
from runner.store.connect import open_database
from runner.store.database import Database
from tests.store.conftest import NOW
from tests.support.cap_holder import Holder

pytestmark = pytest.mark.timeout(120)
DIGEST = Spender("digest", "writer", "gpt-4o-mini")
REVIEW = Spender("review", "reviewer", "gpt-4.1-mini")



def run_of(ledger: CapLedger, spender: Spender, run_id: str = "run-a", attempt: int = 1) -> Budget:
    """A run of ``spender``'s task in the shared scope (its calls are the spender's agent's)."""
    batch = Budget(Caps(), "batch", parent=SharedBudget(Caps(max_cost_usd=1.0), scope="fan-out", ledger=ledger, key="k"))
    return batch.child(Caps(), "task", owner=Owner(run_id, attempt, spender.task))


def reserve(run: Budget, spender: Spender, cost: float = 0.2) -> Reservation:
    """One call of ``spender``'s agent and model: 10 + 10 tokens and ``cost`` at its worst."""
    return run.reserve(Estimate(10, 10, cost), caller=Spender(agent=spender.agent, model=spender.model))


def by_spender(ledger: CapLedger) -> dict[Spender, tuple[Usage, Usage]]:
    return {f.spender: (f.spent, f.reserved) for f in spenders(ledger.db, "k")}


def assert_adds_up(ledger: CapLedger) -> None:
    """The spenders' figures are the scope's."""
    found = spenders(ledger.db, "k")
    spent, reserved = ledger.figures("k")
    for total, part in ((spent, [f.spent for f in found]), (reserved, [f.reserved for f in found])):
        summed = sum(part, Usage())
        assert (summed.input_tokens, summed.output_tokens, summed.model_calls) == (
            total.input_tokens, total.output_tokens, total.model_calls,
        )  # fmt: skip
        assert summed.cost_usd == pytest.approx(total.cost_usd)


def test_settled_released_and_held_calls_count_for_their_spender(ledger: CapLedger) -> None:
    digest, review = run_of(ledger, DIGEST), run_of(ledger, REVIEW, "run-b")
    reserve(digest, DIGEST).settle(Usage(6, 4, 0, 0.05))
    reserve(digest, DIGEST).settle(Usage(3, 2, 0, 0.02), step=False)  # billed, then retried: not a step of its own
    reserve(review, REVIEW, 0.3).settle(Usage(8, 8, 0, 0.1))
    reserve(review, REVIEW).release()  # not made: nothing spent
    reserve(review, REVIEW, 0.25)  # in flight
    reserve(run_of(ledger, Spender("quiet", "q", "m"), "run-c"), Spender("quiet", "q", "m")).release()
    found = spenders(ledger.db, "k")
    assert [f.spender for f in found] == [REVIEW, DIGEST]  # the largest spend first; nothing spent or held: left out
    assert by_spender(ledger)[DIGEST] == (Usage(9, 6, 0, pytest.approx(0.07), 1), Usage())  # type: ignore[arg-type]
    assert by_spender(ledger)[REVIEW] == (Usage(8, 8, 0, 0.1, 1), Usage(10, 10, 0, 0.25, 1))
    assert_adds_up(ledger)


def test_a_call_that_held_nothing_counts_for_its_spender(ledger: CapLedger) -> None:
    run = run_of(ledger, DIGEST)
    run.reserve(Estimate(0, 0, 0.0), count_step=False, caller=Spender(agent="kb", model="embed")).settle(Usage(5, 0, 0, 0.01))
    assert by_spender(ledger) == {Spender("digest", "kb", "embed"): (Usage(5, 0, 0, 0.01), Usage())}
    assert_adds_up(ledger)


def test_a_killed_workers_calls_stay_with_their_spender_when_taken_over_or_settled_dead(
    ledger: CapLedger, store_target: str | Path
) -> None:
    holder = Holder(store_target, ("run-a", 0.3), ("run-b", 0.2), spender=("digest", "writer", "gpt-4o-mini"))
    holder.kill()
    while not ledger.scope("k").dead_holders:  # PostgreSQL ends the session once it sees the socket close
        time.sleep(0.05)
    assert by_spender(ledger) == {DIGEST: (Usage(), Usage(20, 20, 0, pytest.approx(0.5), 2))}  # type: ignore[arg-type]

    resumed = run_of(ledger, DIGEST, "run-a", attempt=2)
    assert resumed.take_over("run-a").cost_usd == pytest.approx(0.3)  # carried forward at its worst case
    reserve(resumed, DIGEST, 0.1).settle(Usage(2, 2, 0, 0.04))  # the new attempt's own call
    (run_b,) = dead_entries(ledger.db, "k", lambda run_id: {})
    ledger.settle_dead("k", lambda run_id: {run_b.id: Usage(4, 4, 0, 0.05)} if run_id == "run-b" else {})
    spent, reserved = by_spender(ledger)[DIGEST]
    assert (spent.input_tokens, spent.output_tokens, spent.model_calls, reserved) == (16, 16, 3, Usage())
    assert spent.cost_usd == pytest.approx(0.3 + 0.04 + 0.05)
    assert_adds_up(ledger)


PREVIOUS_ENTRY_COLUMNS = ("spent_model_calls", "task", "agent", "model")
"""What cap_entries gained when spenders were recorded (a ledger made before has none of them)."""


def previous_ledger(target: str | Path) -> Database:
    """The ledger's tables as the previous version created them, with a settled and a held entry."""
    db = open_database(target)
    statements = [
        "\n".join(line for line in s.splitlines() if line.strip().split(" ")[0] not in PREVIOUS_ENTRY_COLUMNS)
        if "TABLE IF NOT EXISTS cap_entries" in s else s
        for s in SCHEMA.statements(db.dialect)
    ]  # fmt: skip
    db.script(";\n".join(statements))
    assert not set(PREVIOUS_ENTRY_COLUMNS) & db.columns("cap_entries")
    db.execute(
        "INSERT INTO cap_scopes (key, max_cost_usd, spent_input_tokens, spent_output_tokens, spent_cost_usd, spent_model_calls,"
        " reserved_input_tokens, reserved_output_tokens, reserved_cost_usd, reserved_model_calls, created_at)"
        " VALUES ('k', 1.0, 5, 5, 0.1, 1, 10, 10, 0.2, 1, ?)",
        (NOW,),
    )
    db.execute(
        "INSERT INTO cap_entries (scope, id, holder, run_id, attempt, status, input_tokens, output_tokens, cost_usd,"
        " model_calls, spent_input_tokens, spent_output_tokens, spent_cost_usd, created_at)"
        " VALUES ('k', 'e1', 'h', 'r', 1, 'settled', 10, 10, 0.3, 1, 5, 5, 0.1, ?),"
        " ('k', 'e2', 'h', 'r', 1, 'held', 10, 10, 0.2, 1, NULL, NULL, NULL, ?)",
        (NOW, NOW),
    )
    return db


def test_a_previous_versions_ledger_reads_as_an_unknown_spender_and_gains_the_columns(store_target: str | Path) -> None:
    old = previous_ledger(store_target)
    unknown = SpenderFigures(Spender(), Usage(5, 5, 0, 0.1, 1), Usage(10, 10, 0, 0.2, 1))
    try:
        assert spenders(old, "k") == [unknown]  # read as it is: nothing altered
        assert not set(PREVIOUS_ENTRY_COLUMNS) & old.columns("cap_entries")
    finally:
        old.close()
    ledger = CapLedger(open_database(store_target))
    try:
        assert set(PREVIOUS_ENTRY_COLUMNS) <= ledger.db.columns("cap_entries")
        reserve(run_of(ledger, DIGEST), DIGEST, 0.2).settle(Usage(1, 1, 0, 0.01))
        assert spenders(ledger.db, "k") == [unknown, SpenderFigures(DIGEST, Usage(1, 1, 0, 0.01, 1), Usage())]
        assert_adds_up(ledger)
    finally:
        ledger.close()
