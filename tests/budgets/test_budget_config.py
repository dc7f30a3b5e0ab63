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


@pytest.mark.parametrize(
    ("body", "where", "message"),
    [
        ("max_cost_usd: 1\nwindow: day\ntimezone: Mars/Olympus\n", "6:11", "unknown time zone 'Mars/Olympus'"),
        ("max_cost_usd: -1\nwindow: day\n", "4:15", "/max_cost_usd"),
        ("max_cost_usd: .nan\nwindow: day\n", "4:15", "finite number"),
        ("max_cost_usd: 1\nwindow: {hours: 0}\n", "5:", "/window"),
        ("max_cost_usd: 1\nwindow: day\nscope: {agents: [writr]}\n", "6:", "unknown agent 'writr'"),
    ],
    ids=["timezone", "negative", "nan", "zero-hours", "scope-name"],
)
def test_validate_refuses_a_bad_budget_with_exit_2(tmp_path: Path, body: str, where: str, message: str) -> None:
    root = project(tmp_path, budget(body))
    result = run_cli(root, None, "validate")
    said = result.stderr + result.stdout
    assert result.returncode == 2, said
    assert f"budgets.d/b0.yaml:{where}" in said and message in said, said
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


DEGRADING_AGENTS = """\
apiVersion: runner/v1
kind: Agent
name: writer
tags: [nightly]
model: {id: gpt-4o, max_tokens: 100}
fallback_model: {id: gpt-4o-mini, max_tokens: 100}
system_prompt: You write.
---
apiVersion: runner/v1
kind: Agent
name: local_writer
model: {id: gpt-4o-mini, max_tokens: 100}
fallback_model: {id: house-mini, max_tokens: 100}
system_prompt: You write.
"""
DEGRADE = "max_cost_usd: 5\nwindow: day\nwarn_at: [0.95, 0.8]\non_exceed: degrade\n"


def degrading_project(tmp_path: Path, *budgets: str) -> Path:
    files = {"agents.d/a.yaml": DEGRADING_AGENTS, "tasks.d/t.yaml": TASKS}
    files |= {f"budgets.d/b{i}.yaml": text for i, text in enumerate(budgets)}
    return write_project(tmp_path / "p", files)


def test_a_degrading_budget_switches_at_its_first_threshold(tmp_path: Path) -> None:
    root = degrading_project(tmp_path, budget(DEGRADE + "scope: {tags: [nightly]}\n"), budget("max_tokens: 9\nwindow: day\n", "burst"))
    loaded, problems = load_project(root, use_cache=False)
    assert problems == []
    daily, burst = loaded.budgets["daily"], loaded.budgets["burst"]
    assert (daily.on_exceed, daily.degrade_at, burst.on_exceed, burst.degrade_at) == ("degrade", 0.8, "stop", None)
    writer = loaded.agents["writer"]
    assert writer.fallback_model is not None and writer.fallback_model.id == "gpt-4o-mini"
    assert writer.on_fallback().model == writer.fallback_model and loaded.agents["writer"].model.id == "gpt-4o"


@pytest.mark.parametrize(
    ("body", "pointer", "message"),
    [
        ("max_cost_usd: 5\nwindow: day\non_exceed: shrink\n", "/on_exceed", "shrink"),
        ("max_cost_usd: 5\nwindow: day\non_exceed: degrade\nscope: {tags: [nightly]}\n", "/on_exceed",
         "on_exceed: degrade switches to the fallback models at the first warn_at threshold, and this budget declares none"),
        (DEGRADE + "scope: {tasks: [digest]}\n", "/max_cost_usd",
         "the fallback_model 'house-mini' of agent 'local_writer' has no known price"),
    ],
)  # fmt: skip
def test_bad_degrading_budgets_are_located_problems(tmp_path: Path, body: str, pointer: str, message: str) -> None:
    tasks = TASKS.replace("agent: writer", "agent: local_writer") if "digest" in body else TASKS
    files = {"agents.d/a.yaml": DEGRADING_AGENTS, "tasks.d/t.yaml": tasks, "budgets.d/b0.yaml": budget(body)}
    _, problems = load_project(write_project(tmp_path / "p", files), use_cache=False)
    found = [p for p in problems if p.file == "budgets.d/b0.yaml" and p.pointer == pointer and message in p.message]
    assert found, [p.render() for p in problems]
    assert all(p.line >= 1 for p in found)


def test_validate_refuses_degrading_an_agent_without_a_fallback_model_with_exit_2(tmp_path: Path) -> None:
    root = project(tmp_path, budget(DEGRADE + "scope: {tasks: [digest]}\n"))  # writer declares no fallback_model
    result = run_cli(root, None, "validate")
    assert result.returncode == 2, result.stdout + result.stderr
    text = result.stdout + result.stderr
    assert "budgets.d/b0.yaml:7:" in text, text
    assert "budget 'daily' degrades agent 'writer' (run by task 'digest'), which declares no fallback_model" in text
    assert "local_writer" not in text  # outside the scope: it needs none
    assert "Traceback" not in result.stderr


def test_validate_refuses_an_unpriced_fallback_model_under_a_money_budget_with_exit_2(tmp_path: Path) -> None:
    tasks = TASKS.replace("agent: writer", "agent: local_writer")
    files = {"agents.d/a.yaml": DEGRADING_AGENTS, "tasks.d/t.yaml": tasks,
             "budgets.d/b0.yaml": budget("max_cost_usd: 5\nwindow: day\nscope: {agents: [local_writer]}\n")}  # fmt: skip
    result = run_cli(write_project(tmp_path / "p", files), None, "validate")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "budgets.d/b0.yaml:4:" in result.stdout + result.stderr
    assert "the fallback_model 'house-mini' of agent 'local_writer' has no known price" in result.stdout + result.stderr
