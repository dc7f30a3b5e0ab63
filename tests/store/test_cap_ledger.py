"""A cap scope shared by processes (a fan-out's batch caps) on both backends: one atomic
conditional UPDATE per reservation, the write-ahead contract of the local budget, and a cap
that holds when several processes spend against it at once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from runner.caps.budget import Budget, Estimate
from runner.caps.shared import SharedBudget, local_caps, shared_caps
from runner.config.specs import Caps
from runner.core.usage import Usage
from runner.errors import CapReached, UsageError
from runner.store.cap_ledger import CapLedger
from runner.store.connect import open_database

NOW = "2026-01-01T00:00:00+00:00"


@pytest.fixture
def ledger(store_target: str | Path) -> CapLedger:
    opened = CapLedger(open_database(store_target))
    yield opened
    opened.db.close()


def shared(ledger: CapLedger, caps: Caps, key: str = "fanout:d/1/f") -> SharedBudget:
    ledger.open(key, caps, NOW)
    return SharedBudget(shared_caps(caps), scope="fan-out", ledger=ledger, key=key)


def chain(ledger: CapLedger, caps: Caps) -> tuple[Budget, Budget, SharedBudget]:
    """A row's run inside a shard's batch inside the fan-out's shared scope."""
    scope = shared(ledger, caps)
    batch = Budget(Caps(), scope="batch", parent=scope)
    return batch.child(Caps(), "task"), batch, scope


def test_a_reservation_holds_its_worst_case_until_settled(ledger: CapLedger) -> None:
    run, batch, scope = chain(ledger, Caps(max_cost_usd=1.0, max_tokens=10_000))
    held = run.reserve(Estimate(100, 400, 0.3))
    assert ledger.figures(scope.key) == (Usage(), Usage(100, 400, 0, 0.3, 1))
    held.settle(Usage(40, 60, 5, 0.05))
    spent, reserved = ledger.figures(scope.key)
    assert spent == Usage(40, 60, 5, 0.05, 1) and reserved.cost_usd == pytest.approx(0) and reserved.model_calls == 0
    assert batch.spent == run.spent == scope.spent == Usage(40, 60, 5, 0.05, 1)  # every scope counted it once


def test_reasoning_and_cache_write_tokens_are_part_of_the_shared_spend(ledger: CapLedger) -> None:
    run, _, scope = chain(ledger, Caps(max_cost_usd=1.0))
    run.reserve(Estimate(100, 400, 0.3)).settle(Usage(40, 60, 5, 0.05, reasoning_tokens=45, cache_write_tokens=30))
    run.reserve(Estimate(100, 400, 0.3)).settle(Usage(40, 60, 0, 0.05, reasoning_tokens=10))
    spent, _ = ledger.figures(scope.key)
    assert (spent.reasoning_tokens, spent.cache_write_tokens, spent.output_tokens) == (55, 30, 120)
    assert ledger.scope(scope.key).as_dict()["spent"]["reasoning_tokens"] == 55  # the batch report's ledger entry


def test_a_ledger_from_before_reasoning_tokens_were_kept_gains_their_columns(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite3"
    old = CapLedger(open_database(path))
    old.open("k", Caps(max_cost_usd=1.0), NOW)
    for column in ("spent_reasoning_tokens", "spent_cache_write_tokens"):
        old.db.execute(f"ALTER TABLE cap_scopes DROP COLUMN {column}")
    old.close()
    reopened = CapLedger(open_database(path))
    try:
        reopened.settle("k", Usage(), Usage(10, 20, 0, 0.01, 1, reasoning_tokens=15, cache_write_tokens=4))
        spent, _ = reopened.figures("k")
        assert (spent.reasoning_tokens, spent.cache_write_tokens, spent.cost_usd) == (15, 4, pytest.approx(0.01))
    finally:
        reopened.close()


def test_a_refused_reservation_names_the_shared_cap_and_holds_nothing(ledger: CapLedger) -> None:
    run, batch, scope = chain(ledger, Caps(max_cost_usd=1.0))
    first = run.reserve(Estimate(10, 10, 0.6))
    with pytest.raises(CapReached) as refused:
        run.reserve(Estimate(10, 10, 0.6))
    assert (refused.value.cap, refused.value.scope, refused.value.limit) == ("max_cost_usd", "fan-out", 1.0)
    assert ledger.figures(scope.key)[1].cost_usd == pytest.approx(0.6)  # only the first is held
    assert run._reserved.cost_usd == pytest.approx(0.6) and batch._reserved.cost_usd == pytest.approx(0.6)
    first.settle(Usage(10, 10, 0, 0.1))
    run.reserve(Estimate(10, 10, 0.6)).release()  # room again once the worst case became the real cost


def test_nothing_starts_once_the_shared_spend_reached_the_cap(ledger: CapLedger) -> None:
    run, _, scope = chain(ledger, Caps(max_tokens=100))
    run.reserve(Estimate(50, 50, 0.0)).settle(Usage(50, 50))
    with pytest.raises(CapReached, match="fan-out cap max_tokens=100 reached"):
        run.check_can_start()
    other_shard = Budget(Caps(), scope="batch", parent=shared(ledger, Caps(max_tokens=100)))
    with pytest.raises(CapReached):
        other_shard.check_can_start()  # a second process sees the same figures
    assert ledger.figures(scope.key)[1] == Usage()  # the checks held nothing


def test_steps_and_tool_calls_are_shared_too(ledger: CapLedger) -> None:
    run, _, scope = chain(ledger, Caps(max_steps=2, max_tool_calls=1))
    run.reserve(Estimate(1, 1, 0.0)).settle(Usage(1, 1))
    run.reserve(Estimate(1, 1, 0.0)).settle(Usage(1, 1))
    with pytest.raises(CapReached, match="max_steps"):
        run.reserve(Estimate(1, 1, 0.0))
    run.take_tool_call()
    with pytest.raises(CapReached, match="fan-out cap max_tool_calls=1"):
        run.take_tool_call()
    assert ledger.figures(scope.key)[0].tool_calls == 1 and run.spent.tool_calls == 1


def test_a_resumed_batch_does_not_count_past_spend_in_the_shared_scope_again(ledger: CapLedger) -> None:
    _, batch, scope = chain(ledger, Caps(max_cost_usd=1.0))
    batch.reserve(Estimate(0, 0, 0.4)).settle(Usage(cost_usd=0.4))
    retried = Budget(Caps(), scope="batch", parent=shared(ledger, Caps(max_cost_usd=1.0)))
    retried.add_spend(Usage(cost_usd=0.4))  # what the journal says the earlier try spent
    assert retried.spent.cost_usd == 0.4 and ledger.figures(scope.key)[0].cost_usd == pytest.approx(0.4)


def test_a_scope_key_serves_one_set_of_caps(ledger: CapLedger) -> None:
    shared(ledger, Caps(max_cost_usd=1.0, max_wall_seconds=60))
    shared(ledger, Caps(max_cost_usd=1, max_wall_seconds=5))  # the same shared caps: wall time is each process's
    with pytest.raises(UsageError, match="holds caps"):
        shared(ledger, Caps(max_cost_usd=2.0))
    assert local_caps(Caps(max_cost_usd=1.0, max_wall_seconds=60)) == Caps(max_wall_seconds=60)
    with pytest.raises(ValueError, match="holds only"):
        SharedBudget(Caps(max_wall_seconds=1), scope="fan-out", ledger=ledger, key="x")


WORKER = """
import json, random, sys
from runner.caps.budget import Budget, Estimate
from runner.caps.shared import SharedBudget
from runner.config.specs import Caps
from runner.core.usage import Usage
from runner.errors import CapReached
from runner.store.cap_ledger import CapLedger
from runner.store.connect import open_database

target, key, cap, seed = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
ledger = CapLedger(open_database(target))
scope = SharedBudget(Caps(max_cost_usd=cap), scope="fan-out", ledger=ledger, key=key)
batch = Budget(Caps(), scope="batch", parent=scope)
rng, calls, spent = random.Random(seed), 0, 0.0
while True:
    worst = rng.choice([0.01, 0.02, 0.05])
    try:
        held = batch.reserve(Estimate(10, 10, worst))
    except CapReached:
        break
    actual = worst * rng.choice([0.2, 0.5, 1.0])  # an endpoint never bills above the reserved worst case
    held.settle(Usage(5, 5, 0, actual))
    calls, spent = calls + 1, spent + actual
print(json.dumps({"calls": calls, "spent": spent}))
"""


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}


def test_processes_spending_against_one_scope_never_overshoot_it(store_target: str | Path) -> None:
    key, cap = "fanout:many", 1.0
    opened = CapLedger(open_database(store_target))
    opened.open(key, Caps(max_cost_usd=cap), NOW)
    workers = [
        subprocess.Popen([sys.executable, "-c", WORKER, str(store_target), key, str(cap), str(seed)],
                         stdout=subprocess.PIPE, text=True, env=_env())
        for seed in range(4)
    ]
    results = [json.loads(w.communicate(timeout=120)[0]) for w in workers]
    assert all(w.returncode == 0 for w in workers)
    spent, reserved = opened.figures(key)
    opened.db.close()
    total = sum(r["spent"] for r in results)
    assert total == pytest.approx(spent.cost_usd) and spent.model_calls == sum(r["calls"] for r in results)
    assert spent.cost_usd <= cap + 1e-9  # held across the four processes
    assert spent.cost_usd > cap - 0.05 - 1e-9  # and used: refused only when the next worst case no longer fitted
    assert reserved.cost_usd == pytest.approx(0, abs=1e-9) and reserved.model_calls == 0


HOLDER = """
import sys, time
from runner.caps.budget import Budget, Estimate
from runner.caps.shared import SharedBudget
from runner.config.specs import Caps
from runner.store.cap_ledger import CapLedger
from runner.store.connect import open_database

ledger = CapLedger(open_database(sys.argv[1]))
Budget(Caps(), parent=SharedBudget(Caps(max_cost_usd=1.0), scope="fan-out", ledger=ledger, key="k")).reserve(Estimate(1, 1, 0.7))
print("held", flush=True)
time.sleep(600)
"""


def test_a_worker_killed_with_a_call_in_flight_leaves_its_worst_case_counted(store_target: str | Path) -> None:
    ledger = CapLedger(open_database(store_target))
    ledger.open("k", Caps(max_cost_usd=1.0), NOW)
    worker = subprocess.Popen([sys.executable, "-c", HOLDER, str(store_target)], stdout=subprocess.PIPE, env=_env())
    try:
        assert worker.stdout is not None and worker.stdout.readline().strip() == b"held"
    finally:
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait()
        worker.stdout.close()  # type: ignore[union-attr]
    assert ledger.figures("k")[1].cost_usd == pytest.approx(0.7)  # the endpoint may still bill it
    with pytest.raises(CapReached):
        Budget(Caps(), parent=SharedBudget(Caps(max_cost_usd=1.0), scope="fan-out", ledger=ledger, key="k")).reserve(
            Estimate(1, 1, 0.5)
        )
    ledger.db.close()
