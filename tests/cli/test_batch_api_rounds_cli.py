"""``runner batch --via batch-api`` with a tool-using agent: every row's k-th model call goes
out in the k-th provider batch, the tools run in the real sandbox between rounds, checks and
repair turns take rounds of their own, caps hold at batch prices, rounds split at the limits,
and the wall-clock cap holds while waiting on the provider."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from runner.model.batch_endpoints import BatchBehaviour
from runner.model.server import ScriptedServer
from tests.cli.batch_api_project import batch_inputs, chat_calls, live_cost, records, row_of, run, via_api
from tests.cli.rounds_project import ROUNDS, SCRIPT, TASK, USAGE, numbers, rounds_project

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def project() -> Iterator[Path]:
    with rounds_project() as root:
        yield root


def test_each_round_of_every_row_is_one_provider_batch(project: Path) -> None:
    source, out = numbers(project, 4), project / "out.jsonl"
    with ScriptedServer(SCRIPT, batch=BatchBehaviour(polls=2)) as server:
        result = run(project, server, "compute", *via_api(source, out, "--json"))
        assert result.returncode == 0, result.stderr
        batches = batch_inputs(server)
        assert chat_calls(server) == []  # nothing went live
    assert len(batches) == ROUNDS
    for lines in batches:  # every row's k-th call in batch k, once
        assert sorted(row_of(line) for line in lines) == ["r1", "r2", "r3", "r4"]
    first, second, third = ([line["body"]["messages"] for line in lines] for lines in batches)
    assert all(m[-1]["role"] == "user" and m[-1]["content"].startswith("Compute") for m in first)
    assert all(m[-1]["role"] == "tool" and "stdout:\n42" in m[-1]["content"] for m in second)  # the sandbox ran it
    assert all(m[-1]["role"] == "user" and "must be JSON" in m[-1]["content"] for m in third)  # the repair turn
    rows = records(out)
    for record in rows.values():
        assert record["status"] == "done" and record["output"] == {"answer": 42}
        assert record["cost_usd"] == pytest.approx(ROUNDS * live_cost(100, 10) / 2)  # at the batch price
    assert json.loads(result.stdout)["provider_pending"] == []


def test_a_round_larger_than_the_limits_is_split_over_several_batches(project: Path) -> None:
    source, out = numbers(project, 5), project / "out.jsonl"
    with ScriptedServer(SCRIPT, batch=BatchBehaviour(polls=1, max_requests=2)) as server:
        result = run(project, server, "compute", *via_api(source, out, "--batch-max-requests", "2"))
        assert result.returncode == 0, result.stderr
        batches = batch_inputs(server)
    assert [len(lines) for lines in batches] == [2, 2, 1] * ROUNDS
    for k in range(ROUNDS):  # round k's three batches hold every row once
        assert sorted(row_of(line) for lines in batches[3 * k : 3 * k + 3] for line in lines) == [f"r{i}" for i in range(1, 6)]
    assert {r["status"] for r in records(out).values()} == {"done"}


def test_answers_to_requests_a_batch_was_not_sent_are_ignored_and_named(project: Path) -> None:
    """A provider batch whose results also answer requests it was never sent (a provider's bug, or
    a hostile endpoint): those lines reach no row and are never billed to one; the run says so."""
    source, out = numbers(project, 2), project / "out.jsonl"
    with ScriptedServer(SCRIPT, batch=BatchBehaviour(polls=1, stray_lines=2)) as server:
        result = run(project, server, "compute", *via_api(source, out))
        assert result.returncode == 0, result.stderr
        billed = server.billed_usd(batch=True)
    assert "answered 2 request(s) it was not sent (stray-1, stray-2): ignored" in result.stderr
    rows = records(out)
    assert {r["status"] for r in rows.values()} == {"done"} and len(rows) == 2
    assert sum(r["cost_usd"] for r in rows.values()) == pytest.approx(billed)  # what the rows' own lines billed, once


def test_a_round_is_split_by_the_size_of_its_input_file(project: Path) -> None:
    (project / "tasks.d/compute.yaml").write_text(TASK + "batch_api: {max_file_bytes: 2500}\n")
    source, out = numbers(project, 4), project / "out.jsonl"
    with ScriptedServer(SCRIPT, batch=BatchBehaviour(polls=1, max_bytes=2500)) as server:  # a bigger file fails the batch
        result = run(project, server, "compute", *via_api(source, out))
        assert result.returncode == 0, result.stderr
        files = [f.content for f in server.batches.files.values() if f.purpose == "batch"]
    assert len(files) > ROUNDS and all(len(content) <= 2500 for content in files)
    assert {r["status"] for r in records(out).values()} == {"done"}


def test_a_batch_cost_cap_holds_at_batch_prices(project: Path) -> None:
    """The cap fits every row's worst cases at the batch price, not at the live one: every row
    finishes, and what was spent stays under the cap."""
    source, out = numbers(project, 2), project / "out.jsonl"
    with ScriptedServer(SCRIPT, batch=BatchBehaviour(polls=1)) as server:
        result = run(project, server, "compute", *via_api(source, out, "--max-cost-usd", "0.00012", "--json"))
        assert result.returncode == 0, result.stderr
        billed = [usage for _, usage in server.billed]
    summary = json.loads(result.stdout)
    assert summary["counts"]["done"] == 2 and summary["cost_usd"] <= 0.00012
    assert summary["cost_usd"] == pytest.approx(sum(live_cost(u["prompt_tokens"], u["completion_tokens"]) / 2 for u in billed))


def test_a_batch_cost_cap_too_small_for_every_row_stops_the_batch_without_passing_it(project: Path) -> None:
    source, out = numbers(project, 6), project / "out.jsonl"
    with ScriptedServer(SCRIPT, batch=BatchBehaviour(polls=1)) as server:
        result = run(project, server, "compute", *via_api(source, out, "--max-cost-usd", "0.00012", "--json"))
    assert result.returncode == 3, result.stderr
    summary = json.loads(result.stdout)
    assert summary["cost_usd"] <= 0.00012 and summary["stop_kind"] == "max_cost_usd"
    assert summary["counts"]["done"] >= 1 and summary["counts"]["not_run"] >= 1


def test_the_wall_clock_cap_cancels_the_batch_and_keeps_what_it_answered(project: Path) -> None:
    source, out = numbers(project, 4), project / "out.jsonl"
    with ScriptedServer(SCRIPT, batch=BatchBehaviour(polls=10_000, partial=2)) as server:
        # 8 s: the cap must end a batch that is out (it never completes), not one still being prepared
        result = run(project, server, "compute", *via_api(source, out, "--max-wall-seconds", "8", "--json"))
        assert result.returncode == 3, result.stderr
        (batch,) = server.batches.batches.values()
        billed = len(server.billed)
    assert batch.status == "cancelled" and billed == 2  # the two lines it answered before it ended
    summary = json.loads(result.stdout)
    assert summary["stop_kind"] == "max_wall_seconds" and "batch cap max_wall_seconds=8 reached" in summary["stop_reason"]
    rows = records(out)
    assert {r["status"] for r in rows.values()} == {"not_run"}
    spent = sorted(r["cost_usd"] for r in rows.values())  # the answered calls at what they used, the others nothing
    assert spent == pytest.approx([0, 0, live_cost(100, 10) / 2, live_cost(100, 10) / 2])


def test_a_rows_own_wall_clock_cap_holds_while_its_call_waits_on_the_provider(project: Path) -> None:
    (project / "tasks.d/compute.yaml").write_text(TASK.replace("caps: {max_cost_usd: 0.01}", "caps: {max_cost_usd: 0.01, max_wall_seconds: 2}"))
    source, out = numbers(project, 3), project / "out.jsonl"
    with ScriptedServer(SCRIPT, batch=BatchBehaviour(polls=10_000)) as server:
        result = run(project, server, "compute", *via_api(source, out))
        (batch,) = server.batches.batches.values()
    assert result.returncode == 1, result.stderr  # rows capped by their own cap fail; the batch itself was not capped
    assert batch.status == "cancelled"
    rows = records(out)
    assert {(r["status"], r["error_kind"]) for r in rows.values()} == {("failed", "max_wall_seconds")}
    assert all("task cap max_wall_seconds=2 reached" in r["error"] and r["cost_usd"] == 0 for r in rows.values())


def test_a_call_whose_row_stopped_before_its_round_went_out_is_not_paid_for(project: Path) -> None:
    """Row 1's second call waits in the queue while row 2's tool still runs (a round goes out
    only when every row in flight waits on one); both rows reach their wall-clock cap first. The
    queued call was never sent: its reservation is released, so each row costs its first call."""
    (project / "tasks.d/compute.yaml").write_text(TASK.replace("caps: {max_cost_usd: 0.01}", "caps: {max_cost_usd: 0.01, max_wall_seconds: 4}"))
    slow = {"name": "slow tool", "when": {"last_role": "user", "last_message": "^Compute 2 "},
            "reply": {"tool_calls": [{"name": "python", "arguments": {"code": "import time; time.sleep(60)"}}], "usage": USAGE}}  # fmt: skip
    script = {**SCRIPT, "rules": [slow, *SCRIPT["rules"]]}
    source, out = numbers(project, 2), project / "out.jsonl"
    with ScriptedServer(script, batch=BatchBehaviour(polls=1)) as server:
        result = run(project, server, "compute", *via_api(source, out))
        first_round = batch_inputs(server)
    assert result.returncode == 1, result.stderr
    assert len(first_round) == 1  # the second round never went out
    rows = records(out)
    assert {(r["status"], r["error_kind"]) for r in rows.values()} == {("failed", "max_wall_seconds")}, rows
    assert [r["cost_usd"] for r in rows.values()] == pytest.approx([live_cost(100, 10) / 2] * 2), rows
