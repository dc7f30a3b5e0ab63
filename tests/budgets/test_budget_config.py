"""``kind: Budget`` documents: loaded from ``budgets.d/``, checked with located problems, and
refused by ``runner validate`` with exit 2 when their limits, windows, zones or scopes are wrong."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runner.config.budgets import budgets_of_task
from runner.config.project import load_project
from tests.support.project import run_cli, write_project

AGENTS = """\
apiVersion: runner/v1
kind: Agent
name: writer
tags: [nightly]
model: {id: gpt-4o-mini, max_tokens: 100}
system_prompt: You write.
---
apiVersion: runner/v1
kind: Agent
name: local_writer
model: {id: my-own-model, max_tokens: 100}
system_prompt: You write.
"""
TASKS = """\
apiVersion: runner/v1
kind: Task
name: digest
tags: [reports]
agent: writer
goal: Write.
---
apiVersion: runner/v1
kind: Task
name: other
agent: local_writer
goal: Write.
"""


HOOK = "  - webhook: {url: 'https://hooks.example.com/budget'}\n"  # one item of deliver:


def budget(body: str, name: str = "daily") -> str:
    return f"apiVersion: runner/v1\nkind: Budget\nname: {name}\n{body}"


def project(tmp_path: Path, *budgets: str) -> Path:
    files = {"agents.d/a.yaml": AGENTS, "tasks.d/t.yaml": TASKS}
    files |= {f"budgets.d/b{i}.yaml": text for i, text in enumerate(budgets)}
    return write_project(tmp_path / "p", files)


def test_budgets_load_with_windows_zones_and_scopes(tmp_path: Path) -> None:
    root = project(
        tmp_path,
        budget("max_cost_usd: 50\nwindow: day\ntimezone: Europe/Berlin\nscope: {tasks: [digest]}\n"),
        budget("max_cost_usd: 900\nmax_tokens: 1000000\nwindow: month\nscope: {tags: [nightly]}\n", "monthly"),
        budget("max_tokens: 5000\nwindow: {hours: 6}\n", "burst"),
    )
    loaded, problems = load_project(root, use_cache=False)
    assert problems == []
    daily, monthly, burst = (loaded.budgets[n] for n in ("daily", "monthly", "burst"))
    assert (daily.window, daily.timezone, daily.max_cost_usd, daily.tasks) == (
        "day",
        "Europe/Berlin",
        50.0,
        ("digest",),
    )
    assert (monthly.max_tokens, monthly.tags, monthly.task_wide) == (1000000, ("nightly",), True)
    assert (burst.window, burst.window_name, burst.max_cost_usd) == (6, "6h", None)
    assert loaded.agents["writer"].tags == ("nightly",) and loaded.tasks["digest"].tags == ("reports",)
    assert [b.name for b in budgets_of_task(loaded, "digest")] == [
        "daily",
        "monthly",
        "burst",
    ]  # monthly: the agent's tag
    assert [b.name for b in budgets_of_task(loaded, "other")] == ["burst"]
    again, problems = load_project(root)  # through the compiled cache too
    assert problems == [] and again.budgets == loaded.budgets


@pytest.mark.parametrize(
    ("body", "pointer", "message"),
    [
        ("max_cost_usd: -1\nwindow: day\n", "/max_cost_usd", "minimum"),
        ("max_cost_usd: .nan\nwindow: day\n", "/max_cost_usd", "finite number"),
        ("max_cost_usd: 1\nwindow: {hours: 0}\n", "/window", ""),
        ("max_cost_usd: 1\nwindow: fortnight\n", "/window", ""),
        ("max_cost_usd: 1\nwindow: day\ntimezone: Europe/Berln\n", "/timezone", "unknown time zone 'Europe/Berln'"),
        ("max_cost_usd: 1\nwindow: day\nscope: {teams: [a]}\n", "/scope", "teams"),
        (
            "max_cost_usd: 1\nwindow: day\nscope: {tasks: [digst]}\n",
            "/scope/tasks/0",
            "unknown task 'digst'. Did you mean 'digest'?",
        ),
        ("max_cost_usd: 1\nwindow: day\nscope: {agents: [writr]}\n", "/scope/agents/0", "unknown agent 'writr'"),
        (
            "max_cost_usd: 1\nwindow: day\nscope: {tags: [nighty]}\n",
            "/scope/tags/0",
            "no task or agent declares tag 'nighty'",
        ),
        (
            "max_cost_usd: 1\nwindow: day\nscope: {tasks: [other]}\n",
            "/max_cost_usd",
            "'my-own-model' (agent 'local_writer') has no known price",
        ),
        ("window: day\n", "", "max_cost_usd"),
        (f"max_cost_usd: 1\nwindow: day\ndeliver:\n{HOOK}", "/deliver", "deliver: sends the warnings of warn_at"),
        (f"max_cost_usd: 1\nwindow: day\nwarn_at: [0.5]\ndeliver:\n{HOOK}    when: failure\n", "/deliver/0/when", "drop when:"),
        (f"max_cost_usd: 1\nwindow: day\nwarn_at: [0.5]\ndeliver:\n{HOOK}{HOOK}", "/deliver/1", "a second delivery named 'webhook'"),
        (
            "max_cost_usd: 1\nwindow: day\nwarn_at: [0.5]\ndeliver:\n  - webhook: {url: 'https://h.example/x', link: '{{ bugdet }}'}\n",
            "/deliver/0/webhook/link",
            "unknown variable 'bugdet'. Did you mean 'budget'? (a budget's delivery reads budget, warning, run_id, task, today)",
        ),
        ("max_cost_usd: 1\nwindow: day\nwarn_at: [0.5]\ndeliver:\n  - pager: {to: x}\n", "/deliver/0", ""),
    ],
)
def test_bad_budgets_are_located_problems(tmp_path: Path, body: str, pointer: str, message: str) -> None:
    _, problems = load_project(project(tmp_path, budget(body)), use_cache=False)
    assert problems, body
    found = [
        p for p in problems if p.file == "budgets.d/b0.yaml" and p.pointer.startswith(pointer) and message in p.message
    ]
    assert found, [p.render() for p in problems]
    assert all(p.line >= 1 for p in found)


def test_validate_refuses_a_bad_budget_with_exit_2(tmp_path: Path) -> None:
    root = project(tmp_path, budget("max_cost_usd: 1\nwindow: day\ntimezone: Mars/Olympus\n"))
    result = run_cli(root, None, "validate")
    assert result.returncode == 2, result.stdout + result.stderr
    assert (
        "budgets.d/b0.yaml:" in result.stderr + result.stdout
        and "unknown time zone 'Mars/Olympus'" in result.stderr + result.stdout
    )
    assert "Traceback" not in result.stderr


def test_validate_shows_the_budgets_each_task_falls_under(tmp_path: Path) -> None:
    root = project(
        tmp_path,
        budget("max_cost_usd: 5\nwindow: day\nscope: {tags: [nightly]}\n"),
        budget("max_tokens: 5000\nwindow: {hours: 6}\n", "burst"),
    )
    text = run_cli(root, None, "validate")
    assert text.returncode == 0, text.stderr
    assert "task digest: budgets burst, daily" in text.stdout or "task digest: budgets daily, burst" in text.stdout
    assert "task other: budgets burst" in text.stdout
    shown = json.loads(run_cli(root, None, "validate", "--format", "json").stdout)
    assert (
        shown["valid"]
        and sorted(shown["budgets"]["digest"]) == ["burst", "daily"]
        and shown["budgets"]["other"] == ["burst"]
    )
