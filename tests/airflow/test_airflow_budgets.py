"""Budgets over time under Airflow (``dag.test()``), against the loopback model server.

* A task a budget stops fails once, without the retries it has (each would only be refused
  again), and says when the budget's window reopens (its end, in the budget's time zone).
* Two ``runner run`` processes and a two-shard fan-out at concurrency 32, all at once under
  one daily budget on the shared PostgreSQL store, together bill no more than its limit
  (billed: what the server produced, at the shipped prices).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from runner.caps.windows import window_at
from runner.config.budgets import BudgetSpec
from runner.model.server import ScriptedServer
from tests.support.project import runner_env, write_project
from tests.support.services import import_or_missing

pytestmark = [pytest.mark.airflow, pytest.mark.timeout(300), pytest.mark.filterwarnings("ignore::DeprecationWarning")]
import_or_missing("airflow", "apache-airflow is not installed (pip install 'runner[airflow]')")

LIMIT = 0.01
ZONE = "Europe/Berlin"
BUDGET = f"""\
apiVersion: runner/v1
kind: Budget
name: daily
max_cost_usd: {LIMIT}
window: day
timezone: {ZONE}
"""
WRITER = """\
apiVersion: runner/v1
kind: Agent
name: writer
model: {id: gpt-4o-mini, max_tokens: 100, retries: 0}
system_prompt: You write short clear prose.
"""
ADDER = """\
apiVersion: runner/v1
kind: Agent
name: adder
model: {id: gpt-4o-mini, max_tokens: 100}
system_prompt: You add numbers with the calculator.
tools: [calculator]
stuck: {max_repeats: 100}
---
apiVersion: runner/v1
kind: Task
name: add
inputs:
  data: {type: string}
agent: adder
goal: "Add up these figures: {{ inputs.data }}"
"""
ADDER_CALLS = 200


@pytest.fixture
def store_url(postgres_url: str) -> Iterator[str]:
    """A fresh PostgreSQL store; the budget ledger connection the fan-out's tasks opened in this
    process is closed before the database is dropped."""
    from runner.runs.budget_scopes import close_budget_ledgers

    yield postgres_url
    close_budget_ledgers()


def reopens_at(before: datetime, after: datetime) -> set[str]:
    """The end of the daily window at either instant (a test run across midnight meets both)."""
    spec = BudgetSpec("daily", "day", max_cost_usd=LIMIT, timezone=ZONE)
    return {window_at(spec, when).end.isoformat() for when in (before, after)}


def _state(dag_run: Any, task_id: str, map_index: int = -1) -> tuple[str, int]:
    (ti,) = [ti for ti in dag_run.get_task_instances() if (ti.task_id, ti.map_index) == (task_id, map_index)]
    return str(ti.state), ti.try_number


def _manifest(dag_run: Any, task_id: str) -> Any:
    (ti,) = [ti for ti in dag_run.get_task_instances() if ti.task_id == task_id]
    return ti.xcom_pull(task_ids=task_id, key="manifest")


def test_a_task_a_budget_stops_fails_once_and_says_when_the_window_reopens(
    airflow_db: float, project: Path, scripted_server: Any, model_connection: Any, test_dags: Any,
    capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    write_project(project, {"agents.d/writer.yaml": WRITER,
                            "budgets.d/daily.yaml": BUDGET.replace(str(LIMIT), "0.00001")})  # fmt: skip
    before = datetime.now(UTC)
    with scripted_server({"fallback": "label: ok"}) as server:
        model_connection(server.base_url)
        dag_run = test_dags.budget_stop_dag.test()
        requests = server.requests
    after = datetime.now(UTC)
    assert _state(dag_run, "classify") == ("failed", 1), "a budget stop is not retried (the task has retries=2)"
    assert requests == []  # one call's worst case is above the limit: refused before it is sent
    manifest = _manifest(dag_run, "classify")
    assert manifest["status"] == "capped" and manifest["error_kind"] == "max_cost_usd" and manifest["exit_code"] == 3
    assert manifest["error"].startswith("budget 'daily' (day window ")
    (reopens,) = [end for end in reopens_at(before, after) if f"the window reopens at {end}" in manifest["error"]]
    out, err = capfd.readouterr()
    logged = out + err + caplog.text
    assert "ended capped (exit 3" in logged and f"the window reopens at {reopens}" in logged


def _started(argv: list[str], cwd: Path, env: dict[str, str], out: Path, err: Path) -> subprocess.Popen[bytes]:
    with out.open("wb") as stdout, err.open("wb") as stderr:  # the child keeps its own copies
        return subprocess.Popen(argv, cwd=cwd, env=env, stdout=stdout, stderr=stderr, stdin=subprocess.DEVNULL)


def _rows(path: Path, n: int) -> Path:
    path.write_text("".join(json.dumps({"id": f"T{i:03d}", "text": f"ticket {i}"}) + "\n" for i in range(n)))
    return path


def _script() -> dict[str, Any]:
    """The adder keeps calling the calculator (slowly, so the fan-out meets the runs mid-way); a
    fan-out row is one answer billed at its max_tokens."""
    adder = [
        {"name": f"add{i}", "times": 1, "when": {"system": "add numbers"},
         "reply": {"tool_calls": [{"name": "calculator", "arguments": {"expression": f"{i} + {i * 7}"}}],
                   "latency_seconds": 0.3}}
        for i in range(ADDER_CALLS)
    ]  # fmt: skip
    row = {"when": {"system": "short clear prose"},
           "reply": {"content": "label: ok", "usage": {"completion_tokens": 100}, "latency_seconds": 0.05}}  # fmt: skip
    return {"tokenizer": "o200k_base", "rules": [*adder, row], "fallback": "Done."}


def test_two_runs_and_a_two_shard_fanout_at_once_never_bill_above_one_daily_budget(
    airflow_db: float, project: Path, tmp_path: Path, model_connection: Any, test_dags: Any, store_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    write_project(project, {"agents.d/writer.yaml": WRITER, "agents.d/adder.yaml": ADDER, "budgets.d/daily.yaml": BUDGET})
    monkeypatch.setenv("RUNNER_STORE_URL", store_url)  # the fan-out's shared store (no store connection)
    source = _rows(project / "tickets.jsonl", 400)  # 400 rows at $0.000065: more than the whole budget
    digits = ",".join(str(i % 10) for i in range(1500))
    before = datetime.now(UTC)
    with ScriptedServer(_script()) as server:
        model_connection(server.base_url)
        env = runner_env(server, extra={"RUNNER_STORE_URL": store_url})
        argv = [sys.executable, "-m", "runner", "run", "add", "--input", f"data={digits}", "--no-report", "--json"]
        logs = [(tmp_path / f"run{i}.out", tmp_path / f"run{i}.err") for i in range(2)]  # files: a full pipe would stall a run
        runs = [_started(argv, project, env, out, err) for out, err in logs]
        try:
            server.wait_for_requests(2, timeout_seconds=120)  # both runs are spending before the fan-out starts
            dag_run = test_dags.fanout_budget_dag.test(run_conf={"input_path": str(source)})
            for run in runs:
                run.wait(timeout=240)
        finally:
            for run in runs:
                run.kill()
        finished = [(out.read_text(), err.read_text()) for out, err in logs]
        billed, calls = server.billed_usd(), len(server.billed)
    after = datetime.now(UTC)
    assert billed <= LIMIT, f"billed {billed:.6f} USD against a {LIMIT} USD daily budget in {calls} calls"
    assert billed > LIMIT / 2  # the budget, not something else, stopped them

    assert [run.returncode for run in runs] == [3, 3], [err[-2000:] for _, err in finished]
    for out, _ in finished:
        result = json.loads(out.splitlines()[-1])
        assert result["status"] == "capped" and result["error"].startswith("budget 'daily' (day window ")
        assert any(f"the window reopens at {end}" in result["error"] for end in reopens_at(before, after))

    shards = [_state(dag_run, "run_shard", i) for i in (0, 1)]
    assert shards == [("success", 1), ("success", 1)], "a shard a budget stopped is not retried (retries=2)"
    assert _state(dag_run, "merge") == ("failed", 1)
    merged = _manifest(dag_run, "merge")
    assert merged["total"] == 400 and merged["skipped"] > 0 and merged["done"] + merged["skipped"] == 400
    report = json.loads(Path(merged["report_json"]).read_text())
    assert report["run"]["stop_kind"] == "max_cost_usd" and "budget 'daily'" in report["run"]["stop_reason"]
    recorded = merged["cost_usd"] + sum(json.loads(out.splitlines()[-1])["cost_usd"] for out, _ in finished)
    assert recorded == pytest.approx(billed, rel=1e-6)  # every billed call is counted by whoever made it
