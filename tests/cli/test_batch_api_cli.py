"""`runner batch --via batch-api` as a real process against the loopback server's Batch API:
the shipped triage task (one request per row when its answers parse), batch prices, the
provider batch's outcomes (expired, cancelled, partial failures), ``--batch-fallback live``
per call, ``mode: batch_api`` on the task, and what is refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from runner.model.batch_endpoints import BatchBehaviour
from runner.model.server import ScriptedServer
from tests.cli.batch_api_project import batch_inputs, chat_calls, live_cost, records, row_of, via_api, write_rows
from tests.cli.batch_api_project import run as run_task
from tests.support.project import copy_shipped

TRIAGE = {"category": "bug", "urgency": "high", "summary": "It crashes."}
USAGE = {"prompt_tokens": 100, "completion_tokens": 20}
LIVE_COST = live_cost(100, 20)
SCRIPT: dict[str, Any] = {"fallback": {"content": json.dumps(TRIAGE), "usage": USAGE}}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return copy_shipped(tmp_path / "project")


def tickets(root: Path, count: int, body: str = "It crashes on start") -> Path:
    rows = [{"id": f"t{i}", "subject": f"Ticket {i}", "body": f"{body} {i}"} for i in range(1, count + 1)]
    return write_rows(root / "tickets.jsonl", rows)


def run(root: Path, server: ScriptedServer, *args: str, task: str = "triage_ticket") -> Any:
    return run_task(root, server, task, *args)


def test_every_row_is_answered_by_one_provider_batch_at_half_price(project: Path) -> None:
    source, out = tickets(project, 5), project / "out.jsonl"
    with ScriptedServer(SCRIPT, batch=BatchBehaviour(polls=3)) as server:
        result = run(project, server, *via_api(source, out, "--json"))
        assert result.returncode == 0, result.stderr
        assert server.batches.batches_created == 1 and chat_calls(server) == []
        (lines,) = batch_inputs(server)
    rows = records(out)
    assert sorted(rows) == [f"t{i}" for i in range(1, 6)]
    for record in rows.values():
        assert record["status"] == "done" and record["output"] == TRIAGE and record["attempts"] == 1
        assert record["cost_usd"] == pytest.approx(LIVE_COST / 2) and record["tokens"] == 120
    assert sorted(row_of(line) for line in lines) == [f"t{i}" for i in range(1, 6)]
    summary = json.loads(result.stdout)
    assert summary["cost_usd"] == pytest.approx(5 * LIVE_COST / 2) and summary["counts"]["done"] == 5
    assert summary["provider_pending"] == []


def test_a_batch_line_is_the_request_the_live_engine_sends_for_that_row(project: Path) -> None:
    source = tickets(project, 2)
    with ScriptedServer(SCRIPT, batch=BatchBehaviour(polls=1)) as server:
        live = run(project, server, "--input", str(source), "--output", str(project / "live.jsonl"), "--id-column", "id",
                   "--journal", str(project / "live.sqlite3"), "--concurrency", "1", "--progress", "none")
        assert live.returncode == 0, live.stderr
        batch = run(project, server, *via_api(source, project / "batch.jsonl"))
        assert batch.returncode == 0, batch.stderr
        sent = sorted((call.body for call in chat_calls(server)), key=lambda body: body["messages"][-1]["content"])
        (lines,) = batch_inputs(server)
    assert [line["body"] for line in sorted(lines, key=row_of)] == sent
    assert all(line["method"] == "POST" and line["url"] == "/v1/chat/completions" for line in lines)


def test_batch_prices_from_a_prices_document_win_over_half_price(project: Path) -> None:
    (project / "tasks.d" / "prices.yaml").write_text(
        "apiVersion: runner/v1\nkind: Prices\nmodels:\n"
        "  gpt-4o-mini: {input_per_mtok: 0.15, output_per_mtok: 0.60, batch_input_per_mtok: 0.1, batch_output_per_mtok: 0.2}\n"
    )
    source, out = tickets(project, 2), project / "out.jsonl"
    with ScriptedServer(SCRIPT, batch=BatchBehaviour(polls=1)) as server:
        result = run(project, server, *via_api(source, out))
    assert result.returncode == 0, result.stderr
    assert [r["cost_usd"] for r in records(out).values()] == [pytest.approx((100 * 0.1 + 20 * 0.2) / 1_000_000)] * 2


@pytest.mark.parametrize("outcome", ["expired", "cancelled"])
def test_an_unanswered_batch_is_retried_while_attempts_last_then_a_rerun_goes_on(project: Path, outcome: str) -> None:
    source, out = tickets(project, 3), project / "out.jsonl"
    with ScriptedServer(SCRIPT, batch=BatchBehaviour(polls=2, outcome=outcome)) as server:  # type: ignore[arg-type]
        result = run(project, server, *via_api(source, out))
        assert result.returncode == 1, result.stderr
        assert server.batches.batches_created == 2  # the engine's second attempt, in a new batch
        rows = records(out)
        assert {r["status"] for r in rows.values()} == {"failed"} and {r["attempts"] for r in rows.values()} == {2}
        assert {r["error_kind"] for r in rows.values()} == {f"batch_{outcome}"}
        assert all(r["cost_usd"] == 0 for r in rows.values())  # nothing answered, nothing billed
        server.batches.behaviour = BatchBehaviour(polls=1)
        again = run(project, server, *via_api(source, out, "--max-attempts", "3"))
        assert again.returncode == 0, again.stderr
        assert server.batches.batches_created == 3 and chat_calls(server) == []
    assert all(r["status"] == "done" and r["attempts"] == 3 for r in records(out).values())


@pytest.mark.parametrize("outcome", ["expired", "cancelled"])
def test_batch_fallback_live_sends_each_unanswered_call_live_at_the_live_price(project: Path, outcome: str) -> None:
    source, out = tickets(project, 3), project / "out.jsonl"
    with ScriptedServer(SCRIPT, batch=BatchBehaviour(polls=1, outcome=outcome)) as server:  # type: ignore[arg-type]
        result = run(project, server, *via_api(source, out, "--batch-fallback", "live"))
        assert result.returncode == 0, result.stderr
        assert len(chat_calls(server)) == 3 and server.batches.batches_created == 1
    rows = records(out)
    assert all(r["status"] == "done" and r["output"] == TRIAGE and r["attempts"] == 1 for r in rows.values())
    assert all(r["cost_usd"] == pytest.approx(LIVE_COST) for r in rows.values())  # the live call, at the live price


def test_an_expired_batch_keeps_what_it_answered_and_sends_only_the_rest_again(project: Path) -> None:
    source, out = tickets(project, 4), project / "out.jsonl"
    with ScriptedServer(SCRIPT, batch=BatchBehaviour(polls=1, outcome="expired", partial=3)) as server:
        result = run(project, server, *via_api(source, out, "--batch-fallback", "live"))
        assert result.returncode == 0, result.stderr
        assert len(chat_calls(server)) == 1  # only the unanswered line went live
    costs = sorted(r["cost_usd"] for r in records(out).values())
    assert costs == pytest.approx([LIVE_COST / 2] * 3 + [LIVE_COST])


def test_a_failed_line_fails_its_row_whose_next_attempt_goes_in_a_new_batch(project: Path) -> None:
    source, out = tickets(project, 4), project / "out.jsonl"
    script = {"rules": [{"when": {"last_message": "Ticket 2"}, "times": 1, "reply": {"fault": {"status": 500}}}], **SCRIPT}
    with ScriptedServer(script, batch=BatchBehaviour(polls=1)) as server:
        result = run(project, server, *via_api(source, out))
        assert result.returncode == 0, result.stderr
        first, second = batch_inputs(server)
        assert chat_calls(server) == []
    assert len(first) == 4 and [row_of(line) for line in second] == ["t2"]
    rows = records(out)
    assert rows["t2"]["attempts"] == 2 and {r["status"] for r in rows.values()} == {"done"}


def test_a_line_that_keeps_failing_fails_its_row_with_the_kind_a_live_call_has(project: Path) -> None:
    source, out = tickets(project, 3), project / "out.jsonl"
    script = {"rules": [{"when": {"last_message": "Ticket 2"}, "reply": {"fault": {"status": 503}}},
                        {"when": {"last_message": "Ticket 3"}, "reply": {"fault": {"status": 400}}}], **SCRIPT}  # fmt: skip
    with ScriptedServer(script, batch=BatchBehaviour(polls=1)) as server:
        result = run(project, server, *via_api(source, out))
        assert result.returncode == 1
    rows = records(out)
    assert rows["t1"]["status"] == "done"
    assert (rows["t2"]["status"], rows["t2"]["error_kind"], rows["t2"]["attempts"]) == ("failed", "server_error", 2)
    assert (rows["t3"]["status"], rows["t3"]["error_kind"], rows["t3"]["attempts"]) == ("failed", "bad_request", 1)  # final


def test_batch_fallback_live_sends_a_failed_line_live_but_not_one_a_live_call_would_fail(project: Path) -> None:
    source, out = tickets(project, 3), project / "out.jsonl"
    script = {"rules": [{"when": {"last_message": "Ticket 2"}, "times": 1, "reply": {"fault": {"status": 500}}},
                        {"when": {"last_message": "Ticket 3"}, "times": 1, "reply": {"fault": {"status": 400}}}], **SCRIPT}  # fmt: skip
    with ScriptedServer(script, batch=BatchBehaviour(polls=1)) as server:
        result = run(project, server, *via_api(source, out, "--batch-fallback", "live", "--max-attempts", "1"))
        assert [call.body["messages"][-1]["content"] for call in chat_calls(server)] == [
            next(line["body"]["messages"][-1]["content"] for line in batch_inputs(server)[0] if row_of(line) == "t2")
        ]
    assert result.returncode == 1
    rows = records(out)
    assert rows["t2"]["status"] == "done" and rows["t2"]["cost_usd"] == pytest.approx(LIVE_COST)
    assert rows["t3"]["status"] == "failed" and rows["t3"]["error_kind"] == "bad_request"


def test_an_answer_that_fails_the_output_schema_gets_its_repair_turn_in_the_next_round(project: Path) -> None:
    source, out = tickets(project, 2), project / "out.jsonl"
    script = {"rules": [{"when": {"last_message": "Ticket 1"}, "times": 1, "reply": {"content": "not json", "usage": USAGE}}], **SCRIPT}
    with ScriptedServer(script, batch=BatchBehaviour(polls=1)) as server:
        result = run(project, server, *via_api(source, out))
        assert result.returncode == 0, result.stderr
        first, second = batch_inputs(server)
        assert chat_calls(server) == []
    assert len(first) == 2 and [row_of(line) for line in second] == ["t1"]
    assert "must be JSON" in second[0]["body"]["messages"][-1]["content"]
    rows = records(out)
    assert {r["status"] for r in rows.values()} == {"done"}
    assert rows["t1"]["cost_usd"] == pytest.approx(LIVE_COST) and rows["t2"]["cost_usd"] == pytest.approx(LIVE_COST / 2)


def test_a_batch_cost_cap_sends_only_the_rows_that_fit_at_batch_prices(project: Path) -> None:
    source, out = tickets(project, 6), project / "out.jsonl"
    with ScriptedServer(SCRIPT, batch=BatchBehaviour(polls=1)) as server:
        result = run(project, server, *via_api(source, out, "--max-cost-usd", "0.0002", "--json"))
        (lines,) = batch_inputs(server)
    assert result.returncode == 3, result.stderr
    summary = json.loads(result.stdout)
    counts = summary["counts"]
    assert 0 < len(lines) < 6 and counts["done"] == len(lines) and counts["not_run"] == 6 - len(lines)
    assert summary["cost_usd"] <= 0.0002


def test_mode_batch_api_on_the_task_sends_its_calls_in_provider_batches_unless_the_flag_says_live(project: Path) -> None:
    task = project / "tasks.d" / "triage_ticket.yaml"
    task.write_text(task.read_text() + "mode: batch_api\n")
    source = tickets(project, 2)
    with ScriptedServer(SCRIPT, batch=BatchBehaviour(polls=1)) as server:
        common = ("--input", str(source), "--id-column", "id", "--batch-poll-seconds", "0.01", "--progress", "none")
        batched = run(project, server, *common, "--output", str(project / "a.jsonl"), "--journal", str(project / "a.sqlite3"))
        assert batched.returncode == 0, batched.stderr
        assert server.batches.batches_created == 1 and chat_calls(server) == []
        live = run(project, server, *common, "--output", str(project / "b.jsonl"), "--journal", str(project / "b.sqlite3"),
                   "--via", "live")
        assert live.returncode == 0, live.stderr
        assert server.batches.batches_created == 1 and len(chat_calls(server)) == 2


def test_an_agent_on_the_embedded_model_is_refused_before_any_call(project: Path) -> None:
    agent = project / "agents.d" / "triage.yaml"
    agent.write_text(agent.read_text().replace("model: {id: gpt-4o-mini,", "model: {id: smollm2-135m, provider: local,"))
    source, out = tickets(project, 2), project / "out.jsonl"
    with ScriptedServer(SCRIPT) as server:
        result = run(project, server, *via_api(source, out))
        assert server.requests == []
    assert result.returncode == 2, result.stderr
    assert "task 'triage_ticket' cannot run with --via batch-api" in result.stderr and "embedded local model" in result.stderr
    assert "Traceback" not in result.stderr and not out.exists()


@pytest.mark.parametrize("flag", [("--batch-fallback", "live"), ("--batch-max-requests", "10"), ("--batch-max-file-bytes", "10")])
def test_a_batch_api_flag_without_batch_api_mode_is_a_usage_error(project: Path, flag: tuple[str, str]) -> None:
    source = tickets(project, 1)
    with ScriptedServer(SCRIPT) as server:
        result = run(project, server, "--input", str(source), "--output", str(project / "o.jsonl"), *flag)
        assert server.requests == []
    assert result.returncode == 2 and flag[0] in result.stderr and "Traceback" not in result.stderr
