"""``runner budgets`` through the real CLI: per budget, spent, reserved and left in the current
and the last window, from the SQLite ledger of the machine or the shared PostgreSQL store;
``--json``; it writes nothing."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from runner.caps.budget import Estimate, Owner
from runner.caps.windows import window_at
from runner.config.budgets import BudgetSpec
from runner.config.specs import Caps
from runner.core.usage import Usage
from runner.runs.budget_scopes import window_scope
from runner.store.cap_ledger import CapLedger
from runner.store.database import open_database
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
        run.reserve(Estimate(1000, 500, 1.0)).settle(Usage(800, 200, 0, spend))
    window_scope(DAILY, ledger, None, lambda: now).child(Caps(), "task").reserve(Estimate(1000, 500, 0.75))  # in flight
    env = {"RUNNER_STORE_URL": store_target} if isinstance(store_target, str) else {}

    result = run_cli(root, None, "budgets", "--json", env=env, drop=("RUNNER_STORE",))
    assert result.returncode == 0, result.stderr
    shown = {b["name"]: b for b in json.loads(result.stdout)["budgets"]}
    daily = shown["daily"]
    assert daily["limits"] == {"max_cost_usd": 2.0, "max_tokens": 10000} and daily["scope"] == "tasks digest"
    assert daily["current"]["key"] == current.key and daily["current"]["start"].endswith(("+01:00", "+02:00"))
    assert daily["current"]["spent"] == {"cost_usd": 0.5, "tokens": 1000, "model_calls": 1}
    assert daily["current"]["reserved"] == {"cost_usd": 0.75, "tokens": 1500, "model_calls": 1}
    assert daily["current"]["left"] == {"max_cost_usd": 0.75, "max_tokens": 7500}
    assert daily["last"]["spent"]["cost_usd"] == 1.25 and daily["last"]["left"]["max_cost_usd"] == 0.75
    assert shown["monthly"]["current"]["spent"]["cost_usd"] == 0 and shown["monthly"]["scope"] == "the whole project"

    text = run_cli(root, None, "budgets", env=env, drop=("RUNNER_STORE",))
    assert text.returncode == 0, text.stderr
    assert "budget daily  (day in Europe/Berlin; max_cost_usd=2.0, max_tokens=10000; tasks digest)" in text.stdout
    assert (
        "spent $0.500000 (1000 tokens, 1 calls), reserved $0.750000; left: max_cost_usd $0.750000, max_tokens 7500 tokens"
        in text.stdout
    )
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
