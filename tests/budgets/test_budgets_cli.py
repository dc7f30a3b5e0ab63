"""``runner budgets`` through the real CLI: per budget, spent, reserved and left in the current
and the last window, and who spent it (by task, agent and model, as the loopback server
billed each), from the SQLite ledger of the machine or the shared PostgreSQL store; ``--json``;
it writes nothing."""

from __future__ import annotations

import json
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from runner.caps.budget import Estimate, Owner
from runner.caps.windows import window_at
from runner.config.budgets import BudgetSpec
from runner.config.specs import Caps
from runner.core.usage import Usage
from runner.model.server import ScriptedServer
from runner.runs.budget_scopes import window_scope
from runner.store.cap_ledger import CapLedger
from runner.store.connect import open_database
from tests.support.project import run_cli, write_project

pytestmark = pytest.mark.timeout(120)
FILES = {
    "agents.d/a.yaml": "apiVersion: runner/v1\nkind: Agent\nname: writer\nmodel: {id: gpt-4o-mini}\nsystem_prompt: Write.\n",
    "tasks.d/t.yaml": "apiVersion: runner/v1\nkind: Task\nname: digest\nagent: writer\ngoal: Write.\n",
    "budgets.d/daily.yaml": "apiVersion: runner/v1\nkind: Budget\nname: daily\nmax_cost_usd: 2\nmax_tokens: 10000\nwindow: day\n"
    "timezone: Europe/Berlin\nscope: {tasks: [digest]}\n",
    "budgets.d/monthly.yaml": "apiVersion: runner/v1\nkind: Budget\nname: monthly\nmax_cost_usd: 50\nwindow: month\n",
}
DAILY = BudgetSpec("daily", "day", max_cost_usd=2.0, max_tokens=10000, timezone="Europe/Berlin", tasks=("digest",))


def test_budgets_show_current_and_last_windows(tmp_path: Path, store_target: str | Path) -> None:
    root = write_project(tmp_path / "p", FILES)
    target: str | Path = store_target if isinstance(store_target, str) else root / ".runner" / "budgets.sqlite3"
    target_dir = root / ".runner"
    target_dir.mkdir()
    ledger = CapLedger(open_database(target))
    now = datetime.now(UTC)
    current = window_at(DAILY, now)
    yesterday = current.start - timedelta(hours=1)
    for clock, spend in ((lambda: yesterday, 1.25), (lambda: now, 0.5)):
        run = window_scope(DAILY, ledger, None, clock).child(Caps(), "task", owner=Owner("r1"))
        run.reserve(Estimate(1000, 500, 1.0)).settle(Usage(800, 200, 0, spend, reasoning_tokens=150, cache_write_tokens=300))
    window_scope(DAILY, ledger, None, lambda: now).child(Caps(), "task").reserve(Estimate(1000, 500, 0.75))  # in flight
    env = {"RUNNER_STORE_URL": store_target} if isinstance(store_target, str) else {}

    result = run_cli(root, None, "budgets", "--json", env=env, drop=("RUNNER_STORE",))
    assert result.returncode == 0, result.stderr
    shown = {b["name"]: b for b in json.loads(result.stdout)["budgets"]}
    daily = shown["daily"]
    assert daily["limits"] == {"max_cost_usd": 2.0, "max_tokens": 10000} and daily["scope"] == "tasks digest"
    assert daily["current"]["key"] == current.key and daily["current"]["start"].endswith(("+01:00", "+02:00"))
    assert daily["current"]["spent"] == {"cost_usd": 0.5, "tokens": 1000, "model_calls": 1, "reasoning_tokens": 150, "cache_write_tokens": 300}
    assert daily["current"]["reserved"] == {"cost_usd": 0.75, "tokens": 1500, "model_calls": 1}
    assert daily["current"]["left"] == {"max_cost_usd": 0.75, "max_tokens": 7500}
    assert daily["last"]["spent"]["cost_usd"] == 1.25 and daily["last"]["left"]["max_cost_usd"] == 0.75
    assert daily["current"]["spenders"] == [  # reserved with no task, agent or model: an unknown spender
        {"task": None, "agent": None, "model": None, "spent": {"cost_usd": 0.5, "tokens": 1000, "model_calls": 1},
         "reserved": daily["current"]["reserved"]}
    ]  # fmt: skip
    assert shown["monthly"]["current"]["spent"]["cost_usd"] == 0 and shown["monthly"]["scope"] == "the whole project"

    text = run_cli(root, None, "budgets", env=env, drop=("RUNNER_STORE",))
    assert text.returncode == 0, text.stderr
    assert "budget daily  (day in Europe/Berlin; max_cost_usd=2.0, max_tokens=10000; tasks digest)" in text.stdout
    assert (
        "spent $0.500000 (1000 tokens: 150 reasoning, 300 cache writes, 1 calls), reserved $0.750000; left: max_cost_usd $0.750000, "
        "max_tokens 7500 tokens"
        in text.stdout
    )
    assert ["-", "-", "-", "$0.500000", "1000", "1", "$0.750000"] in [line.split() for line in text.stdout.splitlines()]
    ledger.close()


@pytest.mark.parametrize("backend", ["sqlite"])
def test_a_project_that_never_spent_shows_zero_and_creates_no_ledger(tmp_path: Path, backend: str) -> None:
    root = write_project(tmp_path / "p", FILES)
    result = run_cli(root, None, "budgets", "--json", drop=("RUNNER_STORE",))
    assert result.returncode == 0, result.stderr
    assert all(b["current"]["spent"]["cost_usd"] == 0 for b in json.loads(result.stdout)["budgets"])
    assert not (root / ".runner" / "budgets.sqlite3").exists()
    broken = write_project(
        tmp_path / "q", {**FILES, "budgets.d/bad.yaml": FILES["budgets.d/monthly.yaml"].replace("month", "year")}
    )
    refused = run_cli(broken, None, "budgets")
    assert refused.returncode == 2 and "budgets.d/bad.yaml" in refused.stderr and "Traceback" not in refused.stderr


SPENDERS = {
    "agents.d/a.yaml": """\
apiVersion: runner/v1
kind: Agent
name: writer
model: {id: gpt-4o-mini, max_tokens: 100}
system_prompt: You add numbers with the calculator.
tools: [calculator]
---
apiVersion: runner/v1
kind: Agent
name: reviewer
model: {id: gpt-4.1-mini, max_tokens: 100}
system_prompt: You review.
""",
    "tasks.d/t.yaml": """\
apiVersion: runner/v1
kind: Task
name: digest
agent: writer
goal: Add 2 and 3.
---
apiVersion: runner/v1
kind: Task
name: review
agent: reviewer
goal: Review the sum of 2 and 3.
""",
    "budgets.d/daily.yaml": "apiVersion: runner/v1\nkind: Budget\nname: daily\nmax_cost_usd: 5\nwindow: day\n",
}
SPEND_SCRIPT = {  # the writer calls the calculator, then answers; the reviewer answers at once
    "tokenizer": "o200k_base",
    "rules": [{"when": {"model": "^gpt-4o-mini$", "last_role": "user"},
               "reply": {"tool_calls": [{"name": "calculator", "arguments": {"expression": "2 + 3"}}]}}],
    "fallback": "Done.",
}  # fmt: skip


def billed_by_model(server: ScriptedServer) -> dict[str, dict[str, Any]]:
    """What the loopback server billed, per model: cost at the shipped prices, tokens, calls."""
    found: dict[str, dict[str, Any]] = defaultdict(lambda: {"cost_usd": 0.0, "tokens": 0, "model_calls": 0})
    for (model, usage), (_, usd) in zip(server.billed, server.billed_costs(), strict=True):
        found[model]["cost_usd"] += usd
        found[model]["tokens"] += int(usage.get("prompt_tokens", 0)) + int(usage.get("completion_tokens", 0))
        found[model]["model_calls"] += 1
    return dict(found)


def test_budgets_tell_who_spent_by_task_agent_and_model(tmp_path: Path, store_target: str | Path) -> None:
    root = write_project(tmp_path / "p", SPENDERS)
    env = {"RUNNER_STORE_URL": store_target} if isinstance(store_target, str) else {}
    with ScriptedServer(SPEND_SCRIPT) as server:
        for task in ("digest", "review"):
            ran = run_cli(root, server, "run", task, "--no-report", env=env, drop=("RUNNER_STORE",))
            assert ran.returncode == 0, ran.stderr[-2000:]
        billed = billed_by_model(server)
    assert {m: b["model_calls"] for m, b in billed.items()} == {"gpt-4o-mini": 2, "gpt-4.1-mini": 1}

    result = run_cli(root, None, "budgets", "--json", env=env, drop=("RUNNER_STORE",))
    assert result.returncode == 0, result.stderr
    (daily,) = json.loads(result.stdout)["budgets"]
    window = daily["current"]
    spenders = {(s["task"], s["agent"], s["model"]): s for s in window["spenders"]}
    assert set(spenders) == {("digest", "writer", "gpt-4o-mini"), ("review", "reviewer", "gpt-4.1-mini")}
    for (_, _, model), shown in spenders.items():
        assert shown["spent"]["cost_usd"] == pytest.approx(billed[model]["cost_usd"], abs=1e-8)
        assert (shown["spent"]["tokens"], shown["spent"]["model_calls"]) == (billed[model]["tokens"], billed[model]["model_calls"])
        assert shown["reserved"] == {"cost_usd": 0, "tokens": 0, "model_calls": 0}
    costs = [s["spent"]["cost_usd"] for s in window["spenders"]]
    assert costs == sorted(costs, reverse=True)  # the largest spend first
    assert sum(costs) == pytest.approx(window["spent"]["cost_usd"], abs=1e-8)  # who spent adds up to the window
    assert sum(s["spent"]["tokens"] for s in window["spenders"]) == window["spent"]["tokens"]
    assert daily["last"]["spenders"] == []

    text = run_cli(root, None, "budgets", env=env, drop=("RUNNER_STORE",))
    assert text.returncode == 0, text.stderr
    rows = [line.split() for line in text.stdout.splitlines()]
    assert ["task", "agent", "model", "spent", "tokens", "calls", "reserved"] in rows
    for (task, agent, model), shown in spenders.items():
        cost, tokens, calls = f"${shown['spent']['cost_usd']:.6f}", str(billed[model]["tokens"]), str(billed[model]["model_calls"])
        assert [task, agent, model, cost, tokens, calls, "$0.000000"] in rows, text.stdout
