"""A batch stopped by a budget resumes after the limit is raised and bills each row once: real
``runner batch`` processes over a CSV against the loopback server, on the SQLite ledger of the
machine and on the shared PostgreSQL store.

Each row costs two calls (the calculator, then the answer). The daily budget is set so that the
third row's first call fits and its second does not: the batch stops there (exit 3, the budget
named), that row and every later one recorded ``not_run``. With the limit raised, the same
command finishes the batch, and the server's billing shows every call of every row exactly once:
the row stopped half way replays the answer it was given (no call paid twice) and goes on from
there (none lost)."""

from __future__ import annotations

import csv
import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from runner.config.prices import cost_usd, default_prices, find_price
from runner.model.server import RecordedRequest, ScriptedServer
from runner.store.runstore import RunStore
from tests.budgets.test_budget_runs_cli import env_for
from tests.support.project import run_cli, write_project

pytestmark = pytest.mark.timeout(300)
ROWS = 6
STOPPED_ROW = 2  # the row whose second call the budget refuses
AGENTS = """\
apiVersion: runner/v1
kind: Agent
name: adder
model: {id: gpt-4o-mini, max_tokens: 100}
system_prompt: You add numbers with the calculator.
tools: [calculator]
"""
TASKS = """\
apiVersion: runner/v1
kind: Task
name: add
inputs:
  data: {type: string}
agent: adder
goal: "Add up these figures: {{ inputs.data }}"
"""
SCRIPT = {
    "tokenizer": "o200k_base",
    "rules": [{"name": "calculate", "when": {"last_role": "user"},
               "reply": {"tool_calls": [{"name": "calculator", "arguments": {"expression": "1 + 2"}}]}}],
    "fallback": "Done.",
}  # fmt: skip
FIGURES = " ".join(str(n * 37 % 1000) for n in range(300))  # the same length in every row: the same cost


def budget(limit: float) -> str:
    return f"apiVersion: runner/v1\nkind: Budget\nname: daily\nmax_cost_usd: {limit:.8f}\nwindow: day\n"


def row_data(number: int) -> str:
    return f"row{number:02d} {FIGURES}"


def call_of(request: RecordedRequest) -> tuple[int, str]:
    """(row, which call) of a chat request: the row from its goal, the call from its last message."""
    messages = request.body["messages"]
    found = re.search(r"row(\d\d) ", str(messages[1]["content"]))
    assert found is not None, messages
    return int(found.group(1)), "first" if messages[-1]["role"] == "user" else "second"


def limit_stopping_a_row_half_way(root: Path, server: ScriptedServer) -> float:
    """A limit under which rows 0 and 1 finish, row 2's first call fits and its second does not.

    One row run without a budget gives what each call bills (prompt ``p``, completion ``o``); a
    call reserves its prompt and ``max_tokens`` (100) at worst. Before row 2, two rows are spent
    (``2 * row``); its first call needs ``first_worst`` on top, its second ``first + second_worst``
    (the first settled at what it billed). The limit lies halfway between the two."""
    calibration = write_project(root, {"agents.d/a.yaml": AGENTS, "tasks.d/t.yaml": TASKS})
    seen = len(server.billed)
    done = run_cli(calibration, server, "run", "add", "--input", f"data={row_data(99)}", "--no-report", drop=("RUNNER_",))
    assert done.returncode == 0, done.stderr
    (_, first), (_, second) = server.billed[seen:]
    (_, first_usd), (_, second_usd) = server.billed_costs()[seen:]
    price = find_price(default_prices(), "gpt-4o-mini")
    assert price is not None

    def worst(usage: dict[str, Any]) -> float:
        return cost_usd(price, int(usage["prompt_tokens"]), 100)

    spent = STOPPED_ROW * (first_usd + second_usd)
    fits, refused = spent + worst(first), spent + first_usd + worst(second)
    assert refused - fits > 2e-5  # room for the estimate to differ from the billed prompt by many tokens
    return (fits + refused) / 2


def test_a_batch_stopped_by_a_budget_resumes_after_the_limit_is_raised_and_bills_each_row_once(
    tmp_path: Path, store_target: str | Path
) -> None:
    root = write_project(tmp_path / "p", {"agents.d/a.yaml": AGENTS, "tasks.d/t.yaml": TASKS})
    rows = root / "rows.csv"
    with rows.open("w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(["id", "data"])
        writer.writerows([f"r{i}", row_data(i)] for i in range(ROWS))
    env = env_for(store_target)
    batch = ("batch", "add", "--input", str(rows), "--id-column", "id", "--output", str(root / "out.jsonl"),
             "--concurrency", "1", "--progress", "none", "--json")  # fmt: skip
    with ScriptedServer(SCRIPT) as server:  # one endpoint throughout: the rows' configuration stays the same
        limit = limit_stopping_a_row_half_way(tmp_path / "calibration", server)
        calibration_calls = len(server.requests)
        (root / "budgets.d").mkdir()
        (root / "budgets.d" / "daily.yaml").write_text(budget(limit))

        stopped = run_cli(root, server, *batch, env=env, drop=("RUNNER_STORE",))
        first_run = [call_of(r) for r in server.requests[calibration_calls:]]
        records = [json.loads(line) for line in (root / "out.jsonl").read_text().splitlines()]
        (root / "budgets.d" / "daily.yaml").write_text(budget(limit * 10))
        finished = run_cli(root, server, *batch, env=env, drop=("RUNNER_STORE",))
        calls = [call_of(r) for r in server.requests[calibration_calls:]]
        billed, billed_usd = server.billed[2:], server.billed_usd(since=2)  # the calibration's two calls aside

    assert stopped.returncode == 3, stopped.stdout[-2000:] + stopped.stderr[-2000:]
    summary = json.loads(stopped.stdout)
    assert summary["stop_kind"] == "max_cost_usd" and summary["stop_reason"].startswith("budget 'daily' (day window ")
    assert summary["counts"]["done"] == STOPPED_ROW and summary["counts"]["not_run"] == ROWS - STOPPED_ROW
    assert first_run == [(i, call) for i in range(STOPPED_ROW) for call in ("first", "second")] + [(STOPPED_ROW, "first")]
    assert [r["status"] for r in records] == ["done"] * STOPPED_ROW + ["not_run"] * (ROWS - STOPPED_ROW)
    assert all(r["error_kind"] == "max_cost_usd" and "budget 'daily'" in r["error"] for r in records[STOPPED_ROW:])
    half_way = records[STOPPED_ROW]
    assert half_way["attempts"] == 1 and half_way["cost_usd"] > 0  # its first call was billed, and is counted

    assert finished.returncode == 0, finished.stdout[-2000:] + finished.stderr[-2000:]
    done = json.loads(finished.stdout)
    assert done["counts"]["done"] == ROWS and done["exit_code"] == 0
    assert Counter(calls) == {(i, call): 1 for i in range(ROWS) for call in ("first", "second")}, calls
    assert len(billed) == 2 * ROWS  # every call billed once: none paid twice, none lost
    assert done["cost_usd"] == pytest.approx(billed_usd, rel=1e-6)  # and the journal counts what was billed
    records = [json.loads(line) for line in (root / "out.jsonl").read_text().splitlines()]
    assert [r["status"] for r in records] == ["done"] * ROWS
    store = RunStore(store_target if isinstance(store_target, str) else root / ".runner" / "runs.sqlite3", read_only=True)
    try:
        resumed = store.run(records[STOPPED_ROW]["run_id"])
        assert resumed is not None and resumed["status"] == "completed" and resumed["attempts"] == 2
        cached = [c for c in store.model_calls(records[STOPPED_ROW]["run_id"]) if c["cached"]]
        assert len(cached) == 1 and float(cached[0]["cost_usd"]) == 0  # the replayed first call, at no cost
    finally:
        store.close()
