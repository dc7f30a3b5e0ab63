"""A daily budget holds across processes: two ``runner run`` processes at once (and a batch at
concurrency 32) under one budget, against the loopback server, never bill more than its limit
(billed usage as the server reports it, at the shipped prices), on the SQLite ledger of the
machine and on the shared PostgreSQL store. The run that reaches it ends ``capped``, exit 3,
naming the budget, its window, the limit and what was spent; an unpriced model under a money
budget is refused before any call."""

from __future__ import annotations

import json
import random
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

from runner.model.server import ScriptedServer
from tests.support.project import run_cli, write_project

pytestmark = pytest.mark.timeout(300)
LIMIT = 0.004
CALLS = 200
AGENTS = """\
apiVersion: runner/v1
kind: Agent
name: adder
tags: [nightly]
model: {id: gpt-4o-mini, max_tokens: 100}
system_prompt: You add numbers with the calculator.
tools: [calculator]
stuck: {max_repeats: 100}
---
apiVersion: runner/v1
kind: Agent
name: unpriced
model: {id: house-model, max_tokens: 100}
system_prompt: You add numbers.
"""
TASKS = """\
apiVersion: runner/v1
kind: Task
name: add
inputs:
  data: {type: string}
agent: adder
goal: "Add up these figures: {{ inputs.data }}"
---
apiVersion: runner/v1
kind: Task
name: house
agent: unpriced
goal: Add 1 and 2.
"""
BUDGET = f"""\
apiVersion: runner/v1
kind: Budget
name: daily
max_cost_usd: {LIMIT}
window: day
timezone: Europe/Berlin
scope: {{tags: [nightly]}}
"""
HOUSE_BUDGET = """\
apiVersion: runner/v1
kind: Budget
name: house_daily
max_cost_usd: 1
window: day
scope: {agents: [unpriced]}
"""


def script() -> dict[str, Any]:
    """A model that keeps calling the calculator (a different sum each time)."""
    rules = [
        {"name": f"call{i}", "times": 1,
         "reply": {"tool_calls": [{"name": "calculator", "arguments": {"expression": f"{i} + {i * 7}"}}]}}
        for i in range(CALLS)
    ]  # fmt: skip
    return {"tokenizer": "o200k_base", "rules": rules, "fallback": "Done."}


def goal(chars: int = 3000, seed: int = 1) -> str:
    rnd = random.Random(seed)
    return ",".join(rnd.choice("0123456789") for _ in range(chars // 2))[:chars]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return write_project(
        tmp_path / "p", {"agents.d/a.yaml": AGENTS, "tasks.d/t.yaml": TASKS, "budgets.d/daily.yaml": BUDGET}
    )


def env_for(store_target: str | Path) -> dict[str, str]:
    return {"RUNNER_STORE_URL": str(store_target)} if isinstance(store_target, str) else {}


def test_two_runs_at_once_never_bill_above_the_daily_budget(project: Path, store_target: str | Path) -> None:
    results: list[subprocess.CompletedProcess[str]] = []
    with ScriptedServer(script()) as server:

        def run(seed: int) -> None:
            args = ("run", "add", "--input", f"data={goal(seed=seed)}", "--no-report", "--json")
            results.append(run_cli(project, server, *args, env=env_for(store_target), drop=("RUNNER_STORE",)))

        threads = [threading.Thread(target=run, args=(seed,)) for seed in (1, 2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        billed, calls = server.billed_usd(), len(server.billed)
    assert [r.returncode for r in results] == [3, 3], [r.stderr[-2000:] for r in results]
    assert 4 <= calls < CALLS
    assert billed <= LIMIT, f"billed {billed:.6f} USD against a {LIMIT} USD budget in {calls} calls"
    assert billed > LIMIT / 2  # the budget, not something else, stopped them
    for result in results:
        finished = json.loads(result.stdout.splitlines()[-1])
        assert finished["status"] == "capped"
        error = result.stderr + json.dumps(finished)
        assert "budget 'daily' (day window " in error and "+01:00 .. " in error and f"max_cost_usd={LIMIT}" in error
    recorded = sum(json.loads(r.stdout.splitlines()[-1])["cost_usd"] for r in results)
    assert recorded == pytest.approx(billed, rel=1e-6)

    with ScriptedServer(script()) as server:  # a later run in the same window spends what is left, no more
        again = run_cli(project, server, "run", "add", "--input", "data=1,2", "--no-report", "--json",
                        env=env_for(store_target), drop=("RUNNER_STORE",))  # fmt: skip
        assert again.returncode == 3, again.stderr
        assert billed + server.billed_usd() <= LIMIT


@pytest.mark.parametrize("backend", ["sqlite"])
def test_a_batch_at_concurrency_32_never_bills_above_the_budget(project: Path, store_target: str | Path) -> None:
    rows = project / "rows.jsonl"
    rows.write_text("".join(json.dumps({"data": goal(seed=i)}) + "\n" for i in range(64)))
    with ScriptedServer(script()) as server:
        result = run_cli(project, server, "batch", "add", "--input", str(rows), "--concurrency", "32", "--progress", "none", "--output", str(project / "out.jsonl"),
                         timeout=280)  # fmt: skip
        billed = server.billed_usd()
    assert result.returncode == 3, result.stdout[-2000:] + result.stderr[-2000:]
    assert billed <= LIMIT, f"billed {billed:.6f} USD against a {LIMIT} USD budget"
    assert "budget 'daily'" in result.stdout + result.stderr


@pytest.mark.parametrize("backend", ["sqlite"])
def test_an_unpriced_model_under_a_money_budget_is_refused_before_any_call(tmp_path: Path, backend: str) -> None:
    files = {"agents.d/a.yaml": AGENTS, "tasks.d/t.yaml": TASKS, "budgets.d/house.yaml": HOUSE_BUDGET}
    root = write_project(tmp_path / "p", files)
    with ScriptedServer(script()) as server:
        result = run_cli(root, server, "run", "house", "--no-report")
        assert server.requests == []
    assert result.returncode == 2 and "house-model" in result.stderr and "no known price" in result.stderr, (
        result.stderr
    )


@pytest.mark.parametrize("backend", ["sqlite"])
def test_warn_at_thresholds_are_warnings_and_events_of_the_run(tmp_path: Path, backend: str) -> None:
    files = {"agents.d/a.yaml": AGENTS, "tasks.d/t.yaml": TASKS,
             "budgets.d/daily.yaml": BUDGET + "warn_at: [0.25, 0.5]\n"}  # fmt: skip
    root = write_project(tmp_path / "p", files)
    with ScriptedServer(script()) as server:
        result = run_cli(root, server, "run", "add", "--input", f"data={goal()}", "--reports-dir", str(tmp_path / "reports"),
                         "--json")  # fmt: skip
    assert result.returncode == 3, result.stderr
    warnings = json.loads(result.stdout.splitlines()[-1])["warnings"]
    passed = [w for w in warnings if w.startswith("budget 'daily' (day window ")]
    assert [w.split(" passed ")[1].split(" of ")[0] for w in passed] == ["25%", "50%"], warnings
    assert f"of max_cost_usd={LIMIT:g} (cost_usd=" in passed[0]
    logged = [json.loads(line) for line in result.stdout.splitlines()]
    assert [e["message"] for e in logged if e.get("event") == "budget_warning"] == passed
    (report,) = (tmp_path / "reports").rglob("report.md")
    assert "passed 25% of max_cost_usd" in report.read_text()
