"""Caps as a guarantee (issue 12), through the real CLI, the real openai SDK and the loopback
server: endpoints that report more than was reserved, hang, or are cut off by ``kill -9``
with calls in flight; wall-clock caps that cancel what is in flight; every retry reserved."""

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

from runner.model.server import ScriptedServer
from tests.support.project import run_cli, runner_env, write_project

pytestmark = pytest.mark.timeout(300)

AGENTS = """\
apiVersion: runner/v1
kind: Agent
name: answerer
model: {{id: gpt-4o-mini, max_tokens: 100, timeout_seconds: {timeout}, retries: {retries}}}
system_prompt: You answer briefly.
tools: [calculator]
stuck: {{max_repeats: 50}}
"""
TASKS = """\
apiVersion: runner/v1
kind: Task
name: ask
inputs:
  question: {type: string}
agent: answerer
goal: "{{ inputs.question }}"
"""
LIE = {"prompt_tokens": 200, "completion_tokens": 50_000}  # 500x max_tokens: an endpoint billing past what was allowed
TOOL_CALL = {"tool_calls": [{"name": "calculator", "arguments": {"expression": "1 + 1"}}]}


KEY = "sk-test-caps-000001"


def make_project(root: Path, *, timeout: float = 30, retries: int = 0) -> Path:
    return write_project(root, {"agents.d/agents.yaml": AGENTS.format(timeout=timeout, retries=retries), "tasks.d/ask.yaml": TASKS})


def env_for(server: ScriptedServer) -> dict[str, str]:
    return runner_env(server, key=KEY)


def runner(root: Path, server: ScriptedServer, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(root, server, *args, key=KEY, timeout=240)


def questions(root: Path, rows: int) -> Path:
    path = root / "questions.jsonl"
    path.write_text("".join(json.dumps({"id": f"q{i}", "question": f"What is {i} + {i}?"}) + "\n" for i in range(rows)))
    return path


def finished(stdout: str) -> dict[str, Any]:
    return json.loads(stdout.strip().splitlines()[-1])


def test_an_endpoint_reporting_above_max_tokens_stops_the_next_call_and_is_flagged(tmp_path: Path) -> None:
    project = make_project(tmp_path / "p")
    with ScriptedServer({"fallback": dict(TOOL_CALL, usage=LIE)}) as server:
        result = runner(project, server, "run", "ask", "-i", "question=sum?", "--max-cost-usd", "0.01", "--json")
        requests = len(server.requests)
    assert result.returncode == 3, result.stderr
    assert requests == 1  # the excess counted at once: no second call in a scope now over its cap
    end = finished(result.stdout)
    assert end["error_kind"] == "max_cost_usd" and end["cost_usd"] > 0.01
    assert any("above the reserved worst case" in w for w in end["warnings"])
    (report_dir,) = (project / "reports/ask").iterdir()
    assert "above the reserved worst case" in (report_dir / "report.md").read_text()
    assert "above the reserved worst case" in (report_dir / "report.html").read_text()


def test_an_over_reporting_endpoint_overshoots_a_batch_only_by_the_calls_in_flight(tmp_path: Path) -> None:
    project = make_project(tmp_path / "p")
    source = questions(project, 40)
    with ScriptedServer({"fallback": {"content": "2", "usage": LIE, "latency_seconds": 0.2}}) as server:
        result = runner(
            project, server, "batch", "ask", "--input", str(source), "--output", str(project / "out.jsonl"),
            "--concurrency", "4", "--max-cost-usd", "0.01", "--progress", "none",
        )
        requests = len(server.requests)
    assert result.returncode == 3, result.stderr
    assert requests <= 4  # the ones already in flight when the first excess was seen
    report = json.loads(next((project / "reports/ask").glob("batch-*/batch_report.json")).read_text())
    assert report["counts"]["not_run"] >= 36


def test_a_hung_endpoint_ends_at_the_wall_cap_not_after_its_timeouts_and_retries(tmp_path: Path) -> None:
    project = make_project(tmp_path / "p", timeout=10, retries=3)
    with ScriptedServer({"fallback": {"hang_seconds": 60}}) as server:
        started = time.monotonic()
        result = runner(project, server, "run", "ask", "-i", "question=hello", "--max-wall-seconds", "2", "--json")
        took = time.monotonic() - started
    assert result.returncode == 3, result.stderr
    end = finished(result.stdout)
    assert end["error_kind"] == "max_wall_seconds"
    assert took < 10  # one attempt's own timeout would have taken 10 s, four attempts 40 s and more
    assert end["cost_usd"] > 0  # the call was sent: the endpoint may bill it, so its worst case counts


def test_a_batch_wall_cap_cancels_rows_in_flight(tmp_path: Path) -> None:
    project = make_project(tmp_path / "p", timeout=30, retries=2)
    source = questions(project, 6)
    with ScriptedServer({"fallback": {"hang_seconds": 60}}) as server:
        started = time.monotonic()
        result = runner(
            project, server, "batch", "ask", "--input", str(source), "--output", str(project / "out.jsonl"),
            "--concurrency", "3", "--max-wall-seconds", "2", "--progress", "none",
        )
        took = time.monotonic() - started
    assert result.returncode == 3, result.stderr
    assert took < 30
    rows = [json.loads(line) for line in (project / "out.jsonl").read_text().splitlines()]
    assert len(rows) == 6 and all(r["status"] != "done" for r in rows)


def test_every_retry_of_a_call_is_reserved_first(tmp_path: Path) -> None:
    project = make_project(tmp_path / "p", timeout=1, retries=5)
    with ScriptedServer({"fallback": {"hang_seconds": 30}}) as server:
        # each attempt holds its prompt plus max_tokens (100): 600 tokens fit at most four of the six
        result = runner(project, server, "run", "ask", "-i", "question=hello", "--max-tokens", "600", "--json")
        requests = len(server.requests)
    assert result.returncode == 3, result.stderr
    assert finished(result.stdout)["error_kind"] == "max_tokens"
    assert 1 <= requests <= 4  # a retry that could not be reserved was not sent: the retries stop at the cap


def test_retries_of_one_call_are_not_steps_of_their_own(tmp_path: Path) -> None:
    project = make_project(tmp_path / "p", timeout=1, retries=2)
    with ScriptedServer({"fallback": {"hang_seconds": 30}}) as server:
        result = runner(project, server, "run", "ask", "-i", "question=hello", "--max-steps", "2", "--json")
        requests = len(server.requests)
    assert requests == 3  # the first attempt and both retries: one step, whatever max_steps is
    assert result.returncode == 1, result.stderr  # failed on the endpoint (a retry may succeed), not capped
    assert finished(result.stdout)["error_kind"] == "timeout"


def _wait_for_requests(server: ScriptedServer, count: int, limit: float = 60) -> None:
    end = time.monotonic() + limit
    while len(server.requests) < count:
        assert time.monotonic() < end, "the runner never reached the endpoint"
        time.sleep(0.05)
    time.sleep(0.3)


def test_kill_9_with_a_call_in_flight_then_resume_counts_it_at_its_worst_case(tmp_path: Path) -> None:
    project = make_project(tmp_path / "p")
    args = ["run", "ask", "-i", "question=hello", "--run-id", "crash-1", "--max-cost-usd", "0.05"]
    with ScriptedServer({"fallback": {"hang_seconds": 60}}) as server:
        process = subprocess.Popen(
            [sys.executable, "-m", "runner", *args], cwd=project, env=env_for(server),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
        )
        _wait_for_requests(server, 1)
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
    db = sqlite3.connect(project / ".runner/runs.sqlite3")
    ((status, cost),) = db.execute("SELECT status, cost_usd FROM model_calls WHERE run_id = 'crash-1'").fetchall()
    assert status == "reserved" and cost > 0  # written before the call was sent
    with ScriptedServer({"fallback": "hi"}) as server:
        result = runner(project, server, *args, "--json")
    assert result.returncode == 0, result.stderr
    end = finished(result.stdout)
    assert end["cost_usd"] >= cost  # the lost call counts at its worst case
    assert any("in flight" in w and "estimate" in w for w in end["warnings"])
    statuses = [s for (s,) in db.execute("SELECT status FROM model_calls WHERE run_id = 'crash-1' ORDER BY id")]
    assert statuses == ["unsettled", "ok"]


def test_kill_9_mid_batch_then_resume_keeps_the_spend_of_the_calls_in_flight(tmp_path: Path) -> None:
    project = make_project(tmp_path / "p")
    source = questions(project, 8)
    out = project / "out.jsonl"
    args = ["batch", "ask", "--input", str(source), "--output", str(out), "--concurrency", "4", "--progress", "none"]
    with ScriptedServer({"fallback": {"hang_seconds": 60}}) as server:
        process = subprocess.Popen(
            [sys.executable, "-m", "runner", *args], cwd=project, env=env_for(server),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
        )
        _wait_for_requests(server, 4)
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
    db = sqlite3.connect(project / ".runner/runs.sqlite3")
    (in_flight,) = db.execute("SELECT SUM(cost_usd) FROM model_calls WHERE status = 'reserved'").fetchone()
    assert in_flight > 0
    with ScriptedServer({"fallback": "2"}) as server:
        result = runner(project, server, *args)
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 8 and all(r["status"] == "done" for r in rows)
    (ledger,) = db.execute("SELECT SUM(cost_usd) FROM model_calls").fetchone()
    assert sum(r["cost_usd"] for r in rows) == pytest.approx(ledger)  # the output records under-report nothing
    estimated = [r for r in rows if any("estimate" in w for w in r["warnings"])]
    assert len(estimated) == 4  # the rows whose calls were in flight say their spend is partly an estimate


def test_a_resumed_batch_counts_wall_time_from_its_first_attempt(tmp_path: Path) -> None:
    project = make_project(tmp_path / "p")
    source = questions(project, 6)
    out = project / "out.jsonl"
    args = ["batch", "ask", "--input", str(source), "--output", str(out), "--concurrency", "1", "--progress", "none"]
    with ScriptedServer({"fallback": "2"}) as server:
        first = runner(project, server, *args, "--max-tokens", "700")
        assert first.returncode == 3, first.stderr  # stopped part-way by its token cap
        time.sleep(2.5)
        again = runner(project, server, *args, "--max-wall-seconds", "2")
    assert again.returncode == 3, again.stderr
    assert "max_wall_seconds" in again.stdout + again.stderr


def test_an_unreachable_endpoint_is_retried_but_never_counted_as_spend(tmp_path: Path) -> None:
    import socket

    project = make_project(tmp_path / "p", timeout=5, retries=2)
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI")}
    env.update(OPENAI_BASE_URL=f"http://127.0.0.1:{port}/v1", OPENAI_API_KEY="sk-test-caps-000001")
    result = subprocess.run(
        [sys.executable, "-m", "runner", "run", "ask", "-i", "question=hello", "--json"], cwd=project, env=env,
        capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 1, result.stderr
    end = finished(result.stdout)
    assert end["error_kind"] == "unreachable" and end["cost_usd"] == 0 and end["input_tokens"] == 0
