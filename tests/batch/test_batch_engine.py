"""The batch engine with an in-process executor: concurrency, caps, failures, retries, resume,
cancel; every test on both journal backends (SQLite, PostgreSQL)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from runner.batch.engine import FailurePolicy, batch_budget, batch_run_id, run_batch
from runner.batch.ratelimit import SharedRateLimiter
from runner.config.specs import Caps
from runner.errors import EXIT_CAPPED, EXIT_FAILED, EXIT_OK
from runner.runs.options import RunOptions
from tests.batch.batch_fakes import FakeExecutor, rows_of, tickets

pytestmark = pytest.mark.timeout(60)



async def run(source, journal, executor, **kw: Any):
    kw.setdefault("budget", batch_budget(Caps()))
    return await run_batch(rows_of(source), executor, journal=journal, **kw)


async def test_every_row_runs_once_with_bounded_concurrency(make_batch) -> None:
    source, journal = make_batch(tickets(60))
    executor = FakeExecutor(delay=0.005)
    summary = await run(source, journal, executor, concurrency=4)
    assert summary.counts["done"] == 60 and summary.exit_code == EXIT_OK
    assert sorted(executor.executed) == sorted(f"subject {i}" for i in range(1, 61))
    assert executor.max_in_flight == 4
    # a fixed pool of workers, not a task per row (plus the test's own task)
    assert executor.max_tasks <= 4 + 1
    row = journal.row(1)
    assert row is not None and row.output == {"subject": "SUBJECT 1"}


async def test_row_options_share_budget_and_gate_and_keep_run_id_across_attempts(make_batch) -> None:
    source, journal = make_batch(tickets(2))
    gate = SharedRateLimiter(requests_per_minute=6000)
    budget = batch_budget(Caps())
    executor = FakeExecutor(fail={"subject 1": ["server_error"]})
    base = RunOptions(write_report=False, model_override="m")
    await run(source, journal, executor, budget=budget, rate_gate=gate, base_options=base, concurrency=1)
    first, second, retry = executor.options
    assert first.parent_budget is budget and first.rate_gate is gate and first.model_override == "m"
    assert not first.write_report
    assert first.run_id == retry.run_id == batch_run_id(journal.batch_id, "T0001")
    assert second.run_id != first.run_id


def test_run_ids_are_file_safe_and_distinct() -> None:
    assert batch_run_id("b1", "T-0001") == "b1-T-0001"
    odd = batch_run_id("b1", "a/b c")
    assert odd.startswith("b1-a_b_c-") and odd != batch_run_id("b1", "a_b_c")


async def test_usd_cap_stops_new_rows_and_records_not_run(make_batch) -> None:
    source, journal = make_batch(tickets(20))
    budget = batch_budget(Caps(max_cost_usd=0.05))
    executor = FakeExecutor(cost_per_call=0.01, delay=0.001)
    summary = await run(source, journal, executor, budget=budget, concurrency=2)
    counts = summary.counts
    assert counts["done"] == 5 and counts["done"] + counts["not_run"] == 20
    assert summary.usage.cost_usd <= 0.05 + 1e-9
    assert summary.stop_kind == "max_cost_usd" and summary.exit_code == EXIT_CAPPED
    not_run = [r for r in journal.records() if r.status == "not_run"]
    assert all(r.error_kind == "max_cost_usd" and "batch cap max_cost_usd" in (r.error or "") for r in not_run)


async def test_row_capped_by_the_batch_mid_run_is_not_run_and_reruns_on_resume(make_batch) -> None:
    source, journal = make_batch(tickets(3))
    budget = batch_budget(Caps(max_cost_usd=0.035))
    executor = FakeExecutor(cost_per_call=0.01, calls=2)  # each row costs 0.02
    summary = await run(source, journal, executor, budget=budget, concurrency=1)
    second = journal.row(2)
    assert second is not None and second.status == "not_run" and second.attempts == 1
    assert summary.counts == {**summary.counts, "done": 1, "not_run": 2}
    assert summary.usage.cost_usd == pytest.approx(0.03)  # what row 2 spent before the cap is kept
    journal.close()

    _, resumed = make_batch()
    summary = await run(source, resumed, FakeExecutor(cost_per_call=0.01, calls=2), budget=batch_budget(Caps()))
    assert summary.counts["done"] == 3


async def test_token_cap(make_batch) -> None:
    source, journal = make_batch(tickets(10))
    budget = batch_budget(Caps(max_tokens=100))
    summary = await run(source, journal, FakeExecutor(tokens_per_call=(20, 10)), budget=budget, concurrency=3)
    assert summary.counts["done"] == 3 and summary.counts["not_run"] == 7
    assert summary.stop_kind == "max_tokens" and summary.usage.input_tokens + summary.usage.output_tokens <= 100


async def test_wall_time_cap(make_batch) -> None:
    source, journal = make_batch(tickets(10))
    budget = batch_budget(Caps(max_wall_seconds=3600))

    def age_the_batch(inputs: dict[str, Any], options: RunOptions) -> None:
        if inputs["subject"] == "subject 4":
            budget.started = time.monotonic() - 7200  # the batch has now run for two hours

    executor = FakeExecutor(on_start=age_the_batch)
    summary = await run(source, journal, executor, budget=budget, concurrency=1)
    assert summary.counts["done"] == 3 and summary.counts["not_run"] == 7  # row 4 met the cap at its first call
    assert summary.stop_kind == "max_wall_seconds"


async def test_failure_policy_stops_after_n_failures(make_batch) -> None:
    source, journal = make_batch(tickets(12))
    fail = {f"subject {i}": ["server_error"] for i in range(1, 13) if i % 2 == 0}
    summary = await run(
        source, journal, FakeExecutor(fail=fail), concurrency=1, max_attempts=1, failure_policy=FailurePolicy(3)
    )
    assert summary.counts["failed"] == 3 and summary.counts["done"] == 3 and summary.counts["not_run"] == 6
    assert summary.stop_kind == "failure_policy" and summary.exit_code == EXIT_FAILED
    with pytest.raises(ValueError):
        FailurePolicy(0)


async def test_failures_are_retried_up_to_max_attempts_and_final_kinds_are_not(make_batch) -> None:
    source, journal = make_batch(tickets(4))
    fail = {
        "subject 1": ["server_error"],  # recovers on the second attempt
        "subject 2": ["timeout", "timeout", "timeout"],  # never recovers
        "subject 3": ["auth"],  # cannot be fixed by retrying
    }
    executor = FakeExecutor(fail=fail)
    summary = await run(source, journal, executor, concurrency=2, max_attempts=2)
    by_id = {r.id: r for r in journal.records()}
    assert (by_id["T0001"].status, by_id["T0001"].attempts) == ("done", 2)
    assert (by_id["T0002"].status, by_id["T0002"].attempts, by_id["T0002"].retryable) == ("failed", 2, True)
    assert (by_id["T0003"].status, by_id["T0003"].attempts, by_id["T0003"].retryable) == ("failed", 1, False)
    assert summary.counts["done"] == 2 and summary.exit_code == EXIT_FAILED
    journal.close()

    _, resumed = make_batch()
    again = FakeExecutor()
    await run(source, resumed, again, max_attempts=3)
    assert again.executed == ["subject 2"]  # done rows skipped, final failure not retried
    assert resumed.counts()["done"] == 3


async def test_an_exception_in_one_row_does_not_stop_the_batch(make_batch) -> None:
    source, journal = make_batch(tickets(5))

    def explode(inputs: dict[str, Any], options: RunOptions) -> None:
        if inputs["subject"] == "subject 2":
            raise RuntimeError("bug in a tool, key sk-abcdef123456")

    summary = await run(source, journal, FakeExecutor(on_start=explode), max_attempts=1)
    row = journal.row(2)
    assert row is not None and row.status == "failed" and row.error_kind == "internal_error"
    assert "sk-abcdef123456" not in (row.error or "") and "RuntimeError" in (row.error or "")
    assert summary.counts["done"] == 4


async def test_resume_counts_earlier_spend_against_the_batch_cap(make_batch) -> None:
    source, journal = make_batch(tickets(10))
    await run(source, journal, FakeExecutor(cost_per_call=0.01), budget=batch_budget(Caps(max_cost_usd=0.03)))
    assert journal.counts()["done"] == 3
    journal.close()

    _, resumed = make_batch()
    budget = batch_budget(Caps(max_cost_usd=0.05))
    summary = await run(source, resumed, FakeExecutor(cost_per_call=0.01), budget=budget)
    assert summary.counts["done"] == 5 and summary.usage.cost_usd == pytest.approx(0.05)
    assert budget.spent.cost_usd == pytest.approx(0.05)


async def test_cancellation_records_in_flight_rows_as_interrupted(make_batch) -> None:
    source, journal = make_batch(tickets(30))
    started = asyncio.Event()
    executor = FakeExecutor(delay=30, on_start=lambda i, o: started.set())
    task = asyncio.create_task(run(source, journal, executor, concurrency=3))
    await started.wait()
    await asyncio.sleep(0)  # let the other workers start their rows too
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    counts = journal.counts()
    assert counts["failed"] == 3 and counts["not_run"] == 27 and counts["running"] == 0
    assert {r.error_kind for r in journal.records()} == {"interrupted"}
    journal.close()

    _, resumed = make_batch()
    again = FakeExecutor()
    summary = await run(source, resumed, again, concurrency=3)
    assert summary.counts["done"] == 30 and len(again.executed) == 30


async def test_invalid_rows_are_recorded_but_never_run(make_batch) -> None:
    data = tickets(3)
    data[1]["priority"] = "urgent"
    source, journal = make_batch(data)
    executor = FakeExecutor()
    summary = await run(source, journal, executor)
    assert summary.counts["invalid"] == 1 and len(executor.executed) == 2 and summary.exit_code == EXIT_FAILED


async def test_rate_limiter_pause_holds_every_worker(make_batch) -> None:
    source, journal = make_batch(tickets(8))
    gate = SharedRateLimiter()
    acquired: list[float] = []
    pause_ends: list[float] = []

    def pause_on_first_row(inputs: dict[str, Any], options: RunOptions) -> None:
        if inputs["subject"] == "subject 1":
            gate.pause(0.2)  # as if row 1 saw "429 Retry-After: 0.2"
            pause_ends.append(time.monotonic() + 0.2)

    class Recording(FakeExecutor):
        async def _run(self, inputs: dict[str, Any], options: RunOptions):  # type: ignore[override]
            await gate.acquire(10)
            acquired.append(time.monotonic())
            return await super()._run(inputs, RunOptions(run_id=options.run_id, parent_budget=options.parent_budget))

    await run(source, journal, Recording(on_start=pause_on_first_row), concurrency=4, rate_gate=gate)
    assert len(acquired) == 8 and min(acquired) >= pause_ends[0] - 0.01
    assert gate.pauses == 1


async def test_two_shards_share_one_batch_cap_and_it_holds(tmp_path, store_target) -> None:
    """Two batches (a fan-out's shards) run at once, each with its own journal, inside one
    shared scope: together they never pass the cap, and each may spend more than half of it."""
    from runner.batch.inputs import InputSource, file_sha256
    from runner.batch.journal_open import open_batch_journal
    from runner.caps.shared import SharedBudget
    from runner.store.cap_ledger import CapLedger
    from runner.store.connect import open_database
    from tests.batch.batch_fakes import write_csv

    ledger = CapLedger(open_database(store_target))
    ledger.open("fanout:test", Caps(max_cost_usd=0.1), "2026-01-01T00:00:00+00:00")
    shards = []
    for name, rows in (("a", 30), ("b", 2)):  # shard b has almost nothing to do: a may use what b leaves
        path = write_csv(tmp_path / f"{name}.csv", tickets(rows))
        journal = open_batch_journal(tmp_path / f"{name}.sqlite3", task="triage", input_path=path,
                                    input_sha256=file_sha256(path))  # fmt: skip
        budget = batch_budget(Caps())
        budget.parent = SharedBudget(Caps(max_cost_usd=0.1), scope="fan-out", ledger=ledger, key="fanout:test")
        shards.append((InputSource.open(path, id_column="id"), journal, budget))
    executor = FakeExecutor(cost_per_call=0.01, delay=0.002)
    summaries = await asyncio.gather(*(run(source, journal, executor, budget=budget, concurrency=3)
                                       for source, journal, budget in shards))  # fmt: skip
    spent, reserved = ledger.figures("fanout:test")
    assert spent.cost_usd == pytest.approx(0.1) and reserved.cost_usd == pytest.approx(0, abs=1e-12)
    assert sum(s.counts["done"] for s in summaries) == 10  # the cap's worth of rows, over both shards
    assert summaries[0].counts["done"] >= 8 and summaries[0].stop_kind == "max_cost_usd"
    assert summaries[0].exit_code == EXIT_CAPPED
    not_run = [r for r in shards[0][1].records() if r.status == "not_run"]
    assert not_run and all("fan-out cap max_cost_usd=0.1 reached" in (r.error or "") for r in not_run)
    for _, journal, _ in shards:
        journal.close()
    ledger.db.close()
