"""`runner stats` as a real process over a real run store: per task, agent, model and tool,
trends over days, and "did cost per run double this week?" against the week before."""

from __future__ import annotations

import json
import sqlite3
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from runner.model.server import ScriptedServer
from tests.support.project import copy_project, run_cli

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return copy_project(REPO / "tests" / "runs" / "project", tmp_path / "project")


def runner(root: Path, *args: str, server: ScriptedServer | None = None) -> subprocess.CompletedProcess[str]:
    return run_cli(root, server, *args, key="sk-test-stats", drop=("OTEL_",))


def script(prompt: int, completion: int) -> dict[str, Any]:
    """One tool call, then the answer; every call billed at the given token counts."""
    usage = {"prompt_tokens": prompt, "completion_tokens": completion}
    return {"rules": [
        {"when": {"last_role": "user"}, "reply": {"tool_calls": [{"name": "calculator", "arguments": {"expression": "1 + 2"}}], "usage": usage}},
        {"when": {"last_role": "tool"}, "reply": {"content": "3", "usage": usage}},
    ]}


def age_runs(root: Path, days: float) -> None:
    """Move every run recorded so far ``days`` back in time (history, as if recorded then)."""
    with sqlite3.connect(root / ".runner" / "runs.sqlite3") as db:
        for run_id, started, finished in db.execute("SELECT run_id, started_at, finished_at FROM runs").fetchall():
            shift = lambda t: (datetime.fromisoformat(t) - timedelta(days=days)).isoformat(timespec="milliseconds")  # noqa: E731
            db.execute("UPDATE runs SET started_at = ?, finished_at = ? WHERE run_id = ?", (shift(started), shift(finished), run_id))


def run_sums(root: Path, server: ScriptedServer, count: int, *extra: str) -> None:
    for i in range(count):
        done = runner(root, "run", "sum", "-i", f"a={i}", "--no-report", *extra, server=server)
        assert done.returncode in (0, 3), done.stderr


def test_cost_per_run_doubling_this_week_shows_against_the_week_before(project: Path) -> None:
    with ScriptedServer(script(100, 20)) as cheap:
        run_sums(project, cheap, 3)
    age_runs(project, 8)
    with ScriptedServer(script(200, 40)) as dear:
        run_sums(project, dear, 2)
        run_sums(project, dear, 1, "--max-steps", "1")  # capped after its first call
    done = runner(project, "stats", "--since", "7d", "--task", "sum", "--json")
    assert done.returncode == 0, done.stderr
    stats = json.loads(done.stdout)
    (task,) = stats["tasks"]
    assert task["name"] == "sum" and task["count"] == 3
    assert task["statuses"] == {"completed": 2, "capped": 1} and task["cap_hits"] == {"max_steps": 1}
    assert task["success_rate"] == pytest.approx(2 / 3, abs=1e-3)
    per_call_cheap, per_call_dear = 100 * 0.15e-6 + 20 * 0.6e-6, 200 * 0.15e-6 + 40 * 0.6e-6  # gpt-4o-mini's shipped prices
    assert task["vs_previous"]["cost_per"]["before"] == pytest.approx(2 * per_call_cheap)
    assert task["vs_previous"]["cost_per"]["now"] == pytest.approx((2 * 2 + 1) * per_call_dear / 3)
    assert task["vs_previous"]["runs"] == {"now": 3, "before": 3, "ratio": 1.0}
    assert task["tool_calls"] == 3 and task["tool_failure_rate"] == 0.0
    (model,) = stats["models"]
    assert model["name"] == "gpt-4o-mini" and model["count"] == 5 and model["cost_per"] == pytest.approx(per_call_dear)
    (tool,) = stats["tools"]
    assert tool["name"] == "calculator" and tool["count"] == 3 and tool["success_rate"] == 1.0
    (agent,) = stats["agents"]
    assert agent["name"] == "worker" and agent["count"] == 3 and agent["cap_hits"] == {"max_steps": 1}


def test_the_trend_has_one_point_per_day_and_the_text_answers_the_question(project: Path) -> None:
    with ScriptedServer(script(100, 20)) as cheap:
        run_sums(project, cheap, 2)
        age_runs(project, 2)
        run_sums(project, cheap, 1)
        age_runs(project, 8)  # two runs 10 days back, one 8 days back
    with ScriptedServer(script(200, 40)) as dear:
        run_sums(project, dear, 2)
    done = runner(project, "stats", "--since", "14d", "--by", "day", "--json")
    points = json.loads(done.stdout)["trends"]["sum"]
    assert [p["runs"] for p in points] == [2, 1, 2]
    assert points[-1]["cost_per_run"] == pytest.approx(2 * points[0]["cost_per_run"])
    text = runner(project, "stats", "--since", "7d", "--task", "sum")
    assert text.returncode == 0, text.stderr
    assert "sum vs the 1w before:" in text.stdout and "(x2.00)" in text.stdout
    assert "calculator" in text.stdout and "gpt-4o-mini" in text.stdout


def test_the_html_page_has_tables_and_a_trend_chart_per_task(project: Path, tmp_path: Path) -> None:
    with ScriptedServer(script(100, 20)) as server:
        run_sums(project, server, 2)
    page = tmp_path / "stats.html"
    done = runner(project, "stats", "--html", str(page))
    assert done.returncode == 0, done.stderr
    html = page.read_text()
    assert "<h2>Tasks</h2>" in html and "<h2>Trend: sum</h2>" in html and html.count("data:image/png;base64,") == 4
    assert "<script" not in html and "Content-Security-Policy" in html


def test_an_empty_window_says_so(project: Path) -> None:
    with ScriptedServer(script(100, 20)) as server:
        run_sums(project, server, 1)
    age_runs(project, 30)
    done = runner(project, "stats", "--since", "7d")
    assert done.returncode == 0 and "no runs in this window" in done.stdout


@pytest.mark.parametrize(("args", "message"), [
    (("--since", "yesterday"), "--since 'yesterday': give a duration"),
    (("--since", "1d", "--until", "3d"), "is not before --until"),
    (("--by", "month"), "'month' is not one of"),
])
def test_bad_flags_exit_2_naming_the_flag(project: Path, args: tuple[str, ...], message: str) -> None:
    (project / ".runner").mkdir()
    sqlite3.connect(project / ".runner" / "runs.sqlite3").close()
    done = runner(project, "stats", *args)
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr


def test_no_store_exits_2_with_the_fix(project: Path) -> None:
    done = runner(project, "stats")
    assert done.returncode == 2 and "no run store" in done.stderr


def test_windows_parse_relative_and_absolute_times() -> None:
    from runner.stats.window import parse_window

    now = datetime(2026, 12, 1, 12, tzinfo=UTC)
    assert parse_window("36h", now=now).since == datetime(2026, 11, 30, 0, tzinfo=UTC)
    window = parse_window("2026-11-01", "2026-11-08T06:00+01:00", now=now)
    assert window.since == datetime(2026, 11, 1, tzinfo=UTC) and window.until == datetime(2026, 11, 8, 5, tzinfo=UTC)
    assert window.previous().since == datetime(2026, 10, 24, 19, tzinfo=UTC)


def test_names_a_model_wrote_cannot_drive_the_terminal(project: Path) -> None:
    evil = "calc\u001b[2J\u202e"
    hostile = {"rules": [
        {"when": {"last_role": "user"}, "times": 1, "reply": {"tool_calls": [{"name": evil, "arguments": {}}]}},
        {"reply": {"content": "3"}},
    ]}
    with ScriptedServer(hostile) as server:
        run_sums(project, server, 1)
    text = runner(project, "stats")
    assert "\u001b" not in text.stdout and "\u202e" not in text.stdout and "calc\\x1b[2J\\u202e" in text.stdout
    data = runner(project, "stats", "--json").stdout
    assert "\u001b" not in data and "\u202e" not in data
    assert [t["name"] for t in json.loads(data)["tools"]] == [evil]


def test_reasoning_and_cache_write_tokens_are_shown_per_task_agent_and_model(project: Path) -> None:
    rules = script(100, 20)
    for rule in rules["rules"]:
        rule["reply"]["usage"] |= {"reasoning_tokens": 15, "cache_write_tokens": 60}
    with ScriptedServer(rules) as server:
        run_sums(project, server, 2)
    done = runner(project, "stats", "--since", "7d", "--json")
    assert done.returncode == 0, done.stderr
    stats = json.loads(done.stdout)
    for group in ("tasks", "agents", "models"):
        (summary,) = stats[group]
        assert (summary["reasoning_tokens"], summary["cache_write_tokens"]) == (60, 240), (group, summary)  # 2 runs x 2 calls
    text = runner(project, "stats", "--since", "7d")
    assert text.returncode == 0, text.stderr
    assert text.stdout.count("; reasoning 60 tokens; cache writes 240 tokens") == 3, text.stdout
