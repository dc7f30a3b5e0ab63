"""``warn_at`` crossings beyond the run's own report, through real ``runner`` processes against
the loopback server: in the batch report (each with the row whose call made it), in ``runner
stats`` (text and JSON), and exactly once per window however many processes spend in it. On
the SQLite stores of the machine and on the shared PostgreSQL store."""

from __future__ import annotations

import csv
import json
import subprocess
import threading
from pathlib import Path

import pytest

from runner.model.server import ScriptedServer
from tests.budgets.test_budget_resume_cli import AGENTS, SCRIPT, TASKS, row_data
from tests.budgets.test_budget_runs_cli import AGENTS as LOOPING_AGENTS
from tests.budgets.test_budget_runs_cli import TASKS as LOOPING_TASKS
from tests.budgets.test_budget_runs_cli import env_for, goal, script
from tests.support.project import run_cli, write_project

pytestmark = pytest.mark.timeout(300)
ROWS = 6  # about $0.00026 each: $0.0016 in all, 39% of the limit
LIMIT = 0.004


def budget(limit: float, warn_at: str, deliver: str = "") -> str:
    return (f"apiVersion: runner/v1\nkind: Budget\nname: daily\nmax_cost_usd: {limit}\nwindow: day\n"
            f"timezone: Europe/Berlin\nwarn_at: {warn_at}\n{deliver}")  # fmt: skip


def batch_project(root: Path, deliver: str = "") -> Path:
    write_project(root, {"agents.d/a.yaml": AGENTS, "tasks.d/t.yaml": TASKS,
                         "budgets.d/daily.yaml": budget(LIMIT, "[0.1, 0.2]", deliver)})  # fmt: skip
    with (root / "rows.csv").open("w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(["id", "data"])
        writer.writerows([f"r{i}", row_data(i)] for i in range(ROWS))
    return root


def run_batch(root: Path, server: ScriptedServer, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return run_cli(root, server, "batch", "add", "--input", "rows.csv", "--id-column", "id", "--output", "out.jsonl",
                   "--concurrency", "3", "--progress", "none", "--json", env=env, drop=("RUNNER_STORE",))  # fmt: skip


def stats(root: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(root, None, "stats", "--since", "1d", *args, env=env, drop=("RUNNER_STORE",))


def test_warnings_are_in_the_batch_report_and_runner_stats(tmp_path: Path, store_target: str | Path) -> None:
    root = batch_project(tmp_path / "p")
    env = env_for(store_target)
    with ScriptedServer(SCRIPT) as server:
        done = run_batch(root, server, env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    summary = json.loads(done.stdout)
    report = json.loads((Path(summary["report_path"]).parent / "batch_report.json").read_text())
    warnings = report["budget_warnings"]
    assert [(w["threshold"], w["cap"], w["limit"]) for w in warnings] == [(0.1, "max_cost_usd", LIMIT), (0.2, "max_cost_usd", LIMIT)]
    assert all(w["scope"].startswith("budget 'daily' (day window ") and w["spent"] >= w["threshold"] * LIMIT for w in warnings)
    records = {r["id"]: r for r in map(json.loads, (root / "out.jsonl").read_text().splitlines())}
    for warning in warnings:  # the row whose call crossed it says so too
        assert warning["message"] in records[warning["row_id"]]["warnings"]
    markdown = Path(summary["report_path"]).read_text()
    assert "## Budget warnings" in markdown and f"10% of max_cost_usd={LIMIT:g}" in markdown and f"20% of max_cost_usd={LIMIT:g}" in markdown

    shown = stats(root, env, "--json")
    assert shown.returncode == 0, shown.stderr
    listed = json.loads(shown.stdout)["budget_warnings"]
    assert [w["message"] for w in listed] == [w["message"] for w in warnings]
    assert [w["run_id"] for w in listed] == [records[w["row_id"]]["run_id"] for w in warnings]
    assert {w["task"] for w in listed} == {"add"} and all(w["deliveries"] == [] for w in listed)
    text = stats(root, env)
    assert text.returncode == 0, text.stderr
    assert "BUDGET WARNINGS (2)" in text.stdout and f"passed 20% of max_cost_usd={LIMIT:g}" in text.stdout
    assert stats(root, env, "--task", "other", "--json").stdout.count("passed") == 0  # the task filter applies


def test_each_threshold_is_warned_once_however_many_processes_spend_in_the_window(
    tmp_path: Path, store_target: str | Path
) -> None:
    files = {"agents.d/a.yaml": LOOPING_AGENTS, "tasks.d/t.yaml": LOOPING_TASKS,
             "budgets.d/daily.yaml": budget(LIMIT, "[0.25, 0.5, 0.75]") + "scope: {tags: [nightly]}\n"}  # fmt: skip
    root = write_project(tmp_path / "p", files)
    results: list[subprocess.CompletedProcess[str]] = []
    with ScriptedServer(script()) as server:

        def run(seed: int) -> None:
            args = ("run", "add", "--input", f"data={goal(seed=seed)}", "--no-report", "--json")
            results.append(run_cli(root, server, *args, env=env_for(store_target), drop=("RUNNER_STORE",)))

        threads = [threading.Thread(target=run, args=(seed,)) for seed in (1, 2, 3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert [r.returncode for r in results] == [3, 3, 3], [r.stderr[-1000:] for r in results]
    events = [json.loads(line) for r in results for line in r.stdout.splitlines()]
    told = sorted(e["threshold"] for e in events if e.get("event") == "budget_warning")
    assert told == [0.25, 0.5, 0.75]  # every share once: none twice, none missed
