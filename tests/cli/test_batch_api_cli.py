"""`runner batch --via batch-api` as a real process against the loopback server's Batch API."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from runner.model.batch_endpoints import BatchBehaviour
from runner.model.server import ScriptedServer
from tests.support.project import copy_shipped

REPO = Path(__file__).resolve().parents[2]
TRIAGE = {"category": "bug", "urgency": "high", "summary": "It crashes."}
USAGE = {"prompt_tokens": 100, "completion_tokens": 20}
LIVE_COST = (100 * 0.15 + 20 * 0.60) / 1_000_000  # gpt-4o-mini, the shipped prices
SCRIPT: dict[str, Any] = {"fallback": {"content": json.dumps(TRIAGE), "usage": USAGE}}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return copy_shipped(tmp_path / "project")


def tickets(root: Path, count: int, body: str = "It crashes on start") -> Path:
    path = root / "tickets.jsonl"
    lines = [{"id": f"t{i}", "subject": f"Ticket {i}", "body": f"{body} {i}"} for i in range(1, count + 1)]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def run(root: Path, server: ScriptedServer, *args: str, task: str = "triage_ticket", timeout: float = 120) -> subprocess.CompletedProcess[str]:
    argv, env = command(root, server, task, *args)
    return subprocess.run(argv, cwd=root, env=env, capture_output=True, text=True, timeout=timeout)


def command(root: Path, server: ScriptedServer, task: str, *args: str) -> tuple[list[str], dict[str, str]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI")}
    env.update(OPENAI_BASE_URL=server.base_url, OPENAI_API_KEY="sk-test-batch-api")
    return [sys.executable, "-m", "runner", "batch", task, *args], env


def via_api(source: Path, out: Path, *extra: str) -> tuple[str, ...]:
    return ("--input", str(source), "--output", str(out), "--id-column", "id", "--via", "batch-api",
            "--batch-poll-seconds", "0.01", "--progress", "none", *extra)


def records(path: Path) -> dict[str, dict[str, Any]]:
    return {r["id"]: r for r in map(json.loads, path.read_text().splitlines())}


def chat_calls(server: ScriptedServer) -> list[Any]:
    return [r for r in server.requests if r.path.endswith("/chat/completions")]


def uploaded_lines(server: ScriptedServer) -> list[dict[str, Any]]:
    files = [f for f in server.batches.files.values() if f.purpose == "batch"]
    return [json.loads(text) for f in files for text in f.content.decode().splitlines()]


def test_every_row_is_answered_by_one_provider_batch_at_half_price(project: Path) -> None:
    source, out = tickets(project, 5), project / "out.jsonl"
    with ScriptedServer(SCRIPT, batch=BatchBehaviour(polls=3)) as server:
        result = run(project, server, *via_api(source, out, "--json"))
        assert result.returncode == 0, result.stderr
        assert server.batches.batches_created == 1 and chat_calls(server) == []
        lines = uploaded_lines(server)
    rows = records(out)
    assert sorted(rows) == [f"t{i}" for i in range(1, 6)]
    for record in rows.values():
        assert record["status"] == "done" and record["output"] == TRIAGE and record["attempts"] == 1
        assert record["cost_usd"] == pytest.approx(LIVE_COST / 2) and record["tokens"] == 120
    assert sorted(int(line["custom_id"]) for line in lines) == [1, 2, 3, 4, 5]
    summary = json.loads(result.stdout)
    assert summary["cost_usd"] == pytest.approx(5 * LIVE_COST / 2) and summary["counts"]["done"] == 5


def test_a_batch_line_is_the_request_the_live_engine_sends_for_that_row(project: Path) -> None:
    source = tickets(project, 2)
    with ScriptedServer(SCRIPT, batch=BatchBehaviour(polls=1)) as server:
        live = run(project, server, "--input", str(source), "--output", str(project / "live.jsonl"), "--id-column", "id",
                   "--journal", str(project / "live.sqlite3"), "--concurrency", "1", "--progress", "none")
        assert live.returncode == 0, live.stderr
        batch = run(project, server, *via_api(source, project / "batch.jsonl"))
        assert batch.returncode == 0, batch.stderr
        sent = sorted((call.body for call in chat_calls(server)), key=lambda body: body["messages"][-1]["content"])
        lines = sorted(uploaded_lines(server), key=lambda line: int(line["custom_id"]))
    assert [line["body"] for line in lines] == sent
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


def test_kill_9_while_polling_then_resume_reattaches_to_the_same_batch(project: Path) -> None:
    source, out, journal = tickets(project, 4), project / "out.jsonl", project / "journal.sqlite3"
    with ScriptedServer(SCRIPT, batch=BatchBehaviour(polls=10_000)) as server:
        argv, env = command(project, server, "triage_ticket", *via_api(source, out, "--journal", str(journal)))
        process = subprocess.Popen(argv, cwd=project, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            recorded = _wait_for_provider_batch(journal, server)
            assert recorded is not None, "the provider batch id was never recorded"
        finally:
            process.send_signal(signal.SIGKILL)
            process.wait(timeout=30)
        assert not out.exists() and server.batches.batches_created == 1
        server.batches.behaviour = BatchBehaviour(polls=1)
        resumed = subprocess.run(argv, cwd=project, env=env, capture_output=True, text=True, timeout=120)
        assert resumed.returncode == 0, resumed.stderr
        assert server.batches.batches_created == 1
        assert server.batches.batches[recorded].status == "completed"
    rows = records(out)
    assert len(rows) == 4 and all(r["status"] == "done" and r["output"] == TRIAGE for r in rows.values())


def _wait_for_provider_batch(journal: Path, server: ScriptedServer) -> str | None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        time.sleep(0.05)
        if not journal.exists():
            continue
        try:
            with sqlite3.connect(journal, timeout=5) as db:
                found = db.execute("SELECT value FROM batch WHERE key = 'provider_batch_id'").fetchone()
        except sqlite3.OperationalError:
            continue
        if found and found[0] and any(b.polls >= 2 for b in server.batches.batches.values()):
            return str(found[0])  # recorded, and the process is polling it
    return None


@pytest.mark.parametrize("outcome", ["expired", "cancelled"])
def test_an_expired_or_cancelled_batch_fails_every_row_and_a_rerun_submits_them_again(project: Path, outcome: str) -> None:
    source, out = tickets(project, 3), project / "out.jsonl"
    with ScriptedServer(SCRIPT, batch=BatchBehaviour(polls=2, outcome=outcome)) as server:  # type: ignore[arg-type]
        result = run(project, server, *via_api(source, out))
        assert result.returncode == 1, result.stderr
        rows = records(out)
        assert {r["status"] for r in rows.values()} == {"failed"}
        assert {r["error_kind"] for r in rows.values()} == {f"batch_{outcome}"}
        assert all(r["cost_usd"] == 0 for r in rows.values())
        server.batches.behaviour = BatchBehaviour(polls=1)
        again = run(project, server, *via_api(source, out))
        assert again.returncode == 0, again.stderr
        assert server.batches.batches_created == 2 and chat_calls(server) == []
    assert all(r["status"] == "done" and r["attempts"] == 2 for r in records(out).values())


@pytest.mark.parametrize("outcome", ["expired", "cancelled"])
def test_batch_fallback_live_completes_the_rows_the_batch_failed(project: Path, outcome: str) -> None:
    source, out = tickets(project, 3), project / "out.jsonl"
    with ScriptedServer(SCRIPT, batch=BatchBehaviour(polls=1, outcome=outcome)) as server:  # type: ignore[arg-type]
        result = run(project, server, *via_api(source, out, "--batch-fallback", "live"))
        assert result.returncode == 0, result.stderr
        assert len(chat_calls(server)) == 3 and server.batches.batches_created == 1
    rows = records(out)
    assert all(r["status"] == "done" and r["output"] == TRIAGE for r in rows.values())
    assert all(r["cost_usd"] == pytest.approx(LIVE_COST) for r in rows.values())  # the live call, at the live price


def test_a_partial_failure_records_each_row_and_the_fallback_runs_only_the_failed_ones(project: Path) -> None:
    source, out = tickets(project, 4), project / "out.jsonl"
    script = {"rules": [{"when": {"last_message": "Ticket 2"}, "times": 1, "reply": {"fault": {"status": 500}}}], **SCRIPT}
    with ScriptedServer(script, batch=BatchBehaviour(polls=1)) as server:
        failed = run(project, server, *via_api(source, out, "--journal", str(project / "a.sqlite3")))
        assert failed.returncode == 1
        rows = records(out)
        assert rows["t2"]["status"] == "failed" and rows["t2"]["error_kind"] == "server_error"
        assert all(rows[f"t{i}"]["status"] == "done" for i in (1, 3, 4))
    with ScriptedServer(script, batch=BatchBehaviour(polls=1)) as server:
        result = run(project, server, *via_api(source, out, "--batch-fallback", "live", "--journal", str(project / "b.sqlite3")))
        assert result.returncode == 0, result.stderr
        assert len(chat_calls(server)) == 1 and "Ticket 2" in chat_calls(server)[0].body["messages"][-1]["content"]
    assert {r["status"] for r in records(out).values()} == {"done"}


def test_an_answer_that_fails_the_output_schema_is_failed_and_repaired_live_by_the_fallback(project: Path) -> None:
    source, out = tickets(project, 2), project / "out.jsonl"
    script = {"rules": [{"when": {"last_message": "Ticket 1"}, "times": 1, "reply": {"content": "not json"}}], **SCRIPT}
    with ScriptedServer(script, batch=BatchBehaviour(polls=1)) as server:
        result = run(project, server, *via_api(source, out, "--batch-fallback", "live"))
        assert result.returncode == 0, result.stderr
        assert len(chat_calls(server)) == 1
    assert {r["status"] for r in records(out).values()} == {"done"}


def test_a_batch_cost_cap_submits_only_the_rows_that_fit_at_batch_prices(project: Path) -> None:
    source, out = tickets(project, 6), project / "out.jsonl"
    with ScriptedServer(SCRIPT, batch=BatchBehaviour(polls=1)) as server:
        result = run(project, server, *via_api(source, out, "--max-cost-usd", "0.0002", "--json"))
        submitted = len(uploaded_lines(server))
    assert result.returncode == 3, result.stderr
    counts = json.loads(result.stdout)["counts"]
    assert 0 < submitted < 6 and counts["done"] == submitted and counts["not_run"] == 6 - submitted


@pytest.mark.parametrize("task, why", [("data_question", "has tools"), ("daily_report", "pipeline")])
def test_a_task_that_needs_more_than_one_request_is_refused_before_any_call(project: Path, task: str, why: str) -> None:
    source, out = tickets(project, 2), project / "out.jsonl"
    with ScriptedServer(SCRIPT) as server:
        result = run(project, server, *via_api(source, out), task=task)
        assert server.requests == []
    assert result.returncode == 2, result.stderr
    assert f"task '{task}' cannot run with --via batch-api" in result.stderr and why in result.stderr
    assert "Traceback" not in result.stderr and not out.exists()


def test_batch_fallback_without_via_batch_api_is_a_usage_error(project: Path) -> None:
    source = tickets(project, 1)
    with ScriptedServer(SCRIPT) as server:
        result = run(project, server, "--input", str(source), "--output", str(project / "o.jsonl"), "--batch-fallback", "live")
        assert server.requests == []
    assert result.returncode == 2 and "--batch-fallback" in result.stderr
