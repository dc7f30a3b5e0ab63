"""A realistic run record of the daily sales report, and the workspace its artifacts live in."""

from __future__ import annotations

import copy
import hashlib
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from runner.reports import charts

RUN_START = datetime(2026, 11, 30, 6, 0, 0, tzinfo=UTC)
HOSTILE = "<script>alert(1)</script>"

NARRATIVE = """\
# Daily sales: Sunday 29 November 2026

Revenue was **$184,220** (+6.1% vs the previous Sunday), driven by the *Cyber Weekend* promotion.

## Highlights

- **Web** grew fastest: +14% day over day
- The **West** region recovered after Thursday's outage
  - store orders are still 8% below trend
1. Electronics led all categories
2. Returns stayed below 4%

| Region | Revenue | Change |
|---|---:|---:|
| North | 52,310 | +4.2% |
| West | 31,020 | −12.5% |

> Note: figures exclude partner orders that settle after midnight.

Run `query_sales` again after the nightly load if numbers look stale.
"""


def _at(seconds: float) -> str:
    return (RUN_START + timedelta(seconds=seconds)).isoformat()


def _usage(input_tokens: int, output_tokens: int, cost_usd: float, model_calls: int, cached: int = 0) -> dict[str, Any]:
    return {
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "cached_input_tokens": cached,
        "cost_usd": cost_usd,
        "model_calls": model_calls,
    }


def _call(name: str, arguments: dict[str, Any], status: str, seconds: float, excerpt: str) -> dict[str, Any]:
    return {
        "name": name,
        "arguments": arguments,
        "status": status,
        "duration_seconds": seconds,
        "output_excerpt": excerpt,
    }


def _step(step_id: str, kind: str, start: float, seconds: float, **fields: Any) -> dict[str, Any]:
    """A step record with every key present; ``fields`` override the defaults."""
    step: dict[str, Any] = {
        "id": step_id,
        "kind": kind,
        "agent": None,
        "tool": None,
        "status": "completed",
        "output": None,
        "data": None,
        "error": None,
        "started_at": _at(start),
        "duration_seconds": seconds,
        "usage": _usage(0, 0, 0.0, 0),
        "model": None,
        "tool_calls": [],
        "artifacts": [],
    }
    return {**step, **fields}


REGION_TABLE: dict[str, Any] = {
    "columns": ["region", "orders", "revenue", "vs_prev_week"],
    "rows": [
        ["North", 412, 52310.5, 0.042],
        ["South", 388, 47120.0, 0.031],
        ["East", 301, 38760.25, 0.018],
        ["West", 244, 31020.0, -0.125],
        ["Central", 121, 15009.75, 0.007],
    ],
    "sql": "SELECT region, count(*) ...",
}

CATEGORY_TABLE: dict[str, Any] = {
    "title": "Top categories",
    "columns": ["product_category", "units", "revenue"],
    "rows": [["Electronics", 903, 71200.0], ["Home", 1210, 40110.0], ["Apparel", 1502, 33900.0]],
}

PLAN: dict[str, Any] = {
    "rationale": "Query the day's sales, chart them, look for anomalies, then write the summary.",
    "steps": [
        {
            "id": "query_sales",
            "agent": "analyst",
            "goal": "Revenue and orders by region for the report date",
            "depends_on": [],
        },
        {"id": "fetch_fx", "agent": "analyst", "goal": "Fetch EUR/USD for partner revenue", "depends_on": []},
        {
            "id": "chart_revenue",
            "agent": "analyst",
            "goal": "Chart daily revenue by region over 30 days",
            "depends_on": ["query_sales"],
        },
        {"id": "write_summary", "agent": "writer", "goal": "Write the daily summary", "depends_on": ["chart_revenue"]},
    ],
}


def make_record() -> dict[str, Any]:
    """A failed-then-replanned, completed run with tables, charts, costs, caps and a previous run."""
    steps = [
        _step(
            "plan",
            "planner",
            0,
            4.2,
            agent="planner",
            model="gpt-4.1-mini",
            output="Plan with 4 steps.",
            data=PLAN,
            usage=_usage(2100, 380, 0.00142, 1),
        ),
        _step(
            "query_sales",
            "tool",
            4.3,
            0.8,
            tool="sql_query",
            data=REGION_TABLE,
            artifacts=["data/summary.csv"],
            tool_calls=[_call("sql_query", {"sql": "SELECT ..."}, "ok", 0.8, "5 rows")],
        ),
        _step(
            "fetch_fx",
            "agent",
            4.3,
            11.0,
            agent="analyst",
            model="gpt-4.1-mini",
            status="failed",
            error=f"http_get timed out after 10 s {HOSTILE}",
            usage=_usage(1800, 90, 0.00051, 2),
            tool_calls=[_call("http_get", {"url": "https://fx.example/eurusd"}, "error", 10.0, "timeout")],
        ),
        _step("top_categories", "tool", 15.5, 0.6, tool="sql_query", data=CATEGORY_TABLE),
        _step(
            "chart_revenue",
            "agent",
            16.2,
            9.4,
            agent="analyst",
            model="gpt-4.1-mini",
            output="Saved charts/revenue.png",
            usage=_usage(5400, 620, 0.00377, 3, cached=2048),
            artifacts=["charts/revenue.png"],
            tool_calls=[_call("python", {"code": "plot()"}, "ok", 2.1, "ok")],
        ),
        _step(
            "write_summary",
            "synthesis",
            25.8,
            14.1,
            agent="writer",
            model="gpt-4.1",
            output=NARRATIVE,
            usage=_usage(9800, 1150, 0.02880, 1),
        ),
    ]
    replan = copy.deepcopy(PLAN)
    replan["steps"] = [s for s in replan["steps"] if s["id"] != "fetch_fx"]
    record = {
        "schema_version": "runner.report/v1",
        "run_id": "20261130T060000Z-7f3a2c",
        "task": "daily_sales",
        "title": "Daily sales report — 2026-11-29",
        "status": "completed",
        "stop_reason": None,
        "exit_code": 0,
        "started_at": _at(0),
        "finished_at": _at(40.2),
        "duration_seconds": 40.2,
        "inputs": {
            "report_date": "2026-11-29",
            "regions": ["North", "South", "East", "West", "Central"],
            "currency": "USD",
        },
        "config_hash": "sha256:" + hashlib.sha256(b"daily_sales").hexdigest(),
        "final_output": NARRATIVE,
        "plan": PLAN,
        "replans": [{"attempt": 1, "reason": "fetch_fx failed: http_get timed out after 10 s", "plan": replan}],
        "steps": steps,
        "caps": {
            "max_cost_usd": 0.05,
            "max_steps": 40,
            "max_tool_calls": 60,
            "max_tokens": 200000,
            "max_wall_seconds": 600,
            "max_input_tokens": None,
        },
        "artifacts": [
            {"path": "charts/revenue.png", "media_type": "image/png", "step": "chart_revenue"},
            {"path": "data/summary.csv", "media_type": "text/csv", "step": "query_sales"},
        ],
        "previous_run": {
            "run_id": "20261129T060000Z-1b2c3d",
            "finished_at": "2026-11-29T06:00:41+00:00",
            "final_output": NARRATIVE.replace("$184,220", "$173,640").replace("+14%", "+9%"),
            "status": "completed",
            "cost_usd": 0.0301,
        },
        "tables": {"query_sales": REGION_TABLE, "top_categories": CATEGORY_TABLE},
    }
    return copy.deepcopy(record)  # the module-level tables and plan are shared


def make_workspace(root: Path) -> Path:
    """A run workspace holding the record's artifacts: a matplotlib chart and a CSV."""
    days = [f"11-{day:02d}" for day in range(1, 30)]
    png = charts.line_chart(
        days,
        {
            "North": [50 + (d % 7) * 2 + d * 0.3 for d in range(29)],
            "West": [30 + (d % 7) - (8 if d == 25 else 0) for d in range(29)],
        },
        title="Daily revenue by region (k$)",
        y_label="k$",
    )
    (root / "charts").mkdir(parents=True)
    (root / "charts" / "revenue.png").write_bytes(png)
    (root / "data").mkdir()
    (root / "data" / "summary.csv").write_text("region,revenue\nNorth,52310.5\n", encoding="utf-8")
    return root


@pytest.fixture
def record() -> dict[str, Any]:
    """A fresh copy of the realistic record, free to modify."""
    return make_record()


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A workspace with ``charts/revenue.png`` and ``data/summary.csv``."""
    return make_workspace(tmp_path / "workspace")
