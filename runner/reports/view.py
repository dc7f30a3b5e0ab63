"""The report's content, section by section, computed once from a record for every format.

:func:`build_view` turns a run record into a :class:`ReportView`: text already formatted
(money, durations, counts), tables as :class:`~runner.reports.tables.Table`, charts as keys
into the images the renderer was given. Renderers only lay it out.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import PurePosixPath
from typing import Any

from runner.core.degradation import Degradation
from runner.core.usage import cache_hit_rate
from runner.reports import costs, formatting
from runner.reports.changes import Changes, compare_runs
from runner.reports.costs import CapUse
from runner.reports.record import fill_usage_rollups
from runner.reports.tables import Table, data_table, key_value_table

OUTPUT_EXCERPT_CHARS = 3000


@dataclass(frozen=True)
class Chart:
    """An image to show: ``key`` indexes the renderer's images (an artifact's record path)."""

    key: str
    caption: str
    media_type: str


@dataclass(frozen=True)
class Narrative:
    """The final output: Markdown ``text``, a table of ``fields``, or ``json`` for nested data."""

    text: str | None = None
    fields: Table | None = None
    json: str | None = None


@dataclass(frozen=True)
class PlanView:
    """A plan (the first one or a re-plan) with why it was made."""

    heading: str
    reason: str
    rationale: str
    steps: Table


@dataclass(frozen=True)
class TimelineBar:
    """One step on the run's timeline, as percentages of the run's duration."""

    step: str
    status: str
    offset_pct: float
    width_pct: float
    label: str


@dataclass(frozen=True)
class StepDetail:
    """What one step produced: output excerpt, data excerpt, error and tool calls."""

    id: str
    heading: str
    status: str
    error: str
    output: str
    data: str
    tool_calls: Table | None


@dataclass(frozen=True)
class ReportView:
    """Everything a report shows, in the order it shows it."""

    title: str
    task: str
    run_id: str
    status: str
    stop_reason: str
    warnings: list[str]
    degraded: list[str]  # steps whose calls went to a fallback model, in words
    exit_code: int
    finished: str
    facts: list[tuple[str, str]]
    narrative: Narrative
    sources: Table | None
    tables: list[Table]
    charts: list[Chart]
    files: list[str]
    artifact_problems: list[str]
    changes: Changes | None
    plans: list[PlanView]
    steps: Table
    step_errors: list[tuple[str, str]]
    cost_by_agent: Table
    cost_by_model: Table
    total_cost: str
    cost_chart: Chart | None
    caps: list[CapUse]
    inputs: Table
    config_hash: str
    timings: Table
    timeline: list[TimelineBar]
    step_details: list[StepDetail]
    deliveries: Table | None = None  # report.deliver outcomes, once delivered


def build_view(record: Mapping[str, Any], *, with_cost_chart: bool) -> ReportView:
    """The content of the report of ``record`` (which need not have usage rollups yet).

    ``with_cost_chart`` says whether the renderer has the cost-by-step chart to show.
    """
    record = fill_usage_rollups(record)
    total = record["usage"]["total"]
    goals = _plan_goals(record)
    return ReportView(
        title=record.get("title") or formatting.humanize(record["task"]),
        task=record["task"],
        run_id=record["run_id"],
        status=record["status"],
        stop_reason=record.get("stop_reason") or "",
        warnings=list(record.get("warnings") or []),
        degraded=[Degradation.from_dict(d).describe() for step in record["steps"] for d in step.get("degraded") or ()],
        exit_code=record["exit_code"],
        finished=formatting.timestamp(record["finished_at"]),
        facts=_facts(record),
        narrative=_narrative(record.get("final_output")),
        sources=_sources(record),
        tables=[_key_table(step_id, data, goals, record.get("columns") or {}) for step_id, data in (record.get("tables") or {}).items()],
        charts=_charts(record, goals),
        files=[a["path"] for a in record.get("artifacts") or [] if not a["media_type"].startswith("image/")],
        artifact_problems=[f"{p['path']}: {p['reason']}" for p in record.get("artifact_problems") or []],
        changes=compare_runs(record),
        plans=_plans(record),
        steps=_steps_table(record),
        step_errors=[(s["id"], s["error"]) for s in record["steps"] if s.get("error")],
        cost_by_agent=costs.breakdown(record["usage"]["by_agent"], name_header="Agent", total_cost=total["cost_usd"]),
        cost_by_model=costs.breakdown(record["usage"]["by_model"], name_header="Model", total_cost=total["cost_usd"]),
        total_cost=formatting.usd(total["cost_usd"]),
        cost_chart=Chart(costs.COST_CHART_KEY, costs.COST_CHART_CAPTION, "image/png") if with_cost_chart else None,
        caps=costs.cap_uses(record),
        inputs=key_value_table(record.get("inputs") or {}, key_header="Input"),
        config_hash=record.get("config_hash") or "",
        timings=_timings(record),
        timeline=_timeline(record),
        step_details=[_step_detail(step, record.get("final_output")) for step in record["steps"]],
        deliveries=_deliveries(record.get("deliveries") or []),
    )


def _sources(record: Mapping[str, Any]) -> Table | None:
    """The sources the run's tools found (knowledge chunks, web pages, memories), numbered."""
    sources = record.get("sources") or []
    if not sources:
        return None
    rows = [
        [str(n), s.get("citation") or s["location"], s.get("title") or "", s["kind"], ", ".join(s.get("steps") or [])]
        for n, s in enumerate(sources, 1)
    ]
    return Table(["#", "Source", "Title", "Kind", "Found by"], rows, [True, False, False, False, False])


def _facts(record: Mapping[str, Any]) -> list[tuple[str, str]]:
    total = record["usage"]["total"]
    cache = [("Prompt cache", _cache_fact(total))] if total["cached_input_tokens"] else []  # as the batch report: only when used
    reasoning, written = total.get("reasoning_tokens") or 0, total.get("cache_write_tokens") or 0
    details = [("Reasoning tokens", f"{formatting.count(reasoning)} of {formatting.count(total['output_tokens'])} output tokens")] if reasoning else []
    details += [("Cache writes", f"{formatting.count(written)} input tokens")] if written else []
    return [
        ("Duration", formatting.seconds(record["duration_seconds"])),
        ("Cost", formatting.usd(total["cost_usd"])),
        ("Tokens", formatting.count(total["total_tokens"])),
        *cache,
        *details,
        ("Steps", formatting.count(len(record["steps"]))),
        ("Model calls", formatting.count(total["model_calls"])),
        ("Tool calls", formatting.count(total["tool_calls"])),
    ]


def _cache_fact(total: Mapping[str, Any]) -> str:
    """The prompt-cache hit rate: ``42.0% of 12,000 input tokens`` (``—`` without input)."""
    hit = cache_hit_rate(total["input_tokens"], total["cached_input_tokens"])
    if hit is None:
        return "—"
    return f"{formatting.rate(hit)} of {formatting.count(total['input_tokens'])} input tokens"


def _narrative(output: Any) -> Narrative:
    if output is None or output == "":
        return Narrative()
    if isinstance(output, str):
        return Narrative(text=output)
    if isinstance(output, dict) and all(not isinstance(value, dict | list) for value in output.values()):
        return Narrative(fields=key_value_table(output, key_header="Field"))
    return Narrative(json=json.dumps(output, indent=2, ensure_ascii=False, default=str))


def _plan_goals(record: Mapping[str, Any]) -> dict[str, str]:
    plans = [record.get("plan")] + [r["plan"] for r in record.get("replans") or []]
    return {step["id"]: step["goal"] for plan in plans if plan for step in plan["steps"]}


def _describe(step_id: str | None, goals: Mapping[str, str]) -> str:
    if not step_id:
        return ""
    goal = goals.get(step_id)
    return f"{step_id}: {goal}" if goal else formatting.humanize(step_id)


def _key_table(step_id: str, data: Mapping[str, Any], goals: Mapping[str, str], styles: Mapping[str, Any]) -> Table:
    title = data.get("title") or formatting.humanize(step_id)
    caption = data.get("caption") or (
        f"From step {step_id}: {goals[step_id]}" if step_id in goals else f"From step {step_id}"
    )
    return data_table(data, title=str(title), caption=str(caption), styles=styles)


def _charts(record: Mapping[str, Any], goals: Mapping[str, str]) -> list[Chart]:
    return [
        Chart(
            key=artifact["path"],
            caption=artifact.get("caption")
            or _describe(artifact.get("step"), goals)
            or PurePosixPath(artifact["path"]).stem,
            media_type=artifact["media_type"],
        )
        for artifact in record.get("artifacts") or []
        if artifact["media_type"].startswith("image/")
    ]


def _deliveries(entries: list[Mapping[str, Any]]) -> Table | None:
    """Where the report went: one row per delivery, failures with their reason."""
    if not entries:
        return None
    rows = [
        [
            e["name"], e["kind"], e.get("target") or "", "completed" if e["status"] == "delivered" else "failed",
            formatting.count(e.get("attempts") or 0),
            "delivered by an earlier attempt" if e.get("earlier_attempt") else (e.get("error") or ", ".join(e.get("files") or [])),
        ]
        for e in entries
    ]  # fmt: skip
    return Table(["Delivery", "Kind", "To", "Status", "Attempts", "Detail"], rows, [False, False, False, False, True, False], status_column=3)


def _plans(record: Mapping[str, Any]) -> list[PlanView]:
    views = []
    if record.get("plan"):
        heading = "Initial plan" if record.get("replans") else "Plan"
        views.append(_plan_view(heading, "", record["plan"]))
    for replan in record.get("replans") or []:
        views.append(_plan_view(f"Re-plan {replan['attempt']}", replan["reason"], replan["plan"]))
    return views


def _plan_view(heading: str, reason: str, plan: Mapping[str, Any]) -> PlanView:
    rows = [[s["id"], s["agent"], s["goal"], ", ".join(s.get("depends_on") or []) or "—"] for s in plan["steps"]]
    table = Table(["Step", "Agent", "Goal", "Depends on"], rows, [False] * 4)
    return PlanView(heading, reason, plan.get("rationale") or "", table)


def _steps_table(record: Mapping[str, Any]) -> Table:
    by_step = record["usage"]["by_step"]
    rows = []
    for step in record["steps"]:
        usage = by_step.get(step["id"]) or {}
        rows.append(
            [
                step["id"],
                step["kind"],
                step.get("agent") or step.get("tool") or "—",
                step["status"],
                formatting.seconds(step.get("duration_seconds")),
                formatting.count(usage.get("total_tokens", 0)),
                formatting.count(usage.get("tool_calls", 0)),
                formatting.usd(usage.get("cost_usd", 0.0)),
            ]
        )
    columns = ["Step", "Kind", "Agent / tool", "Status", "Duration", "Tokens", "Tool calls", "USD"]
    return Table(columns, rows, [False] * 4 + [True] * 4, status_column=3)


def _timings(record: Mapping[str, Any]) -> Table:
    rows = [
        ["Started", formatting.timestamp(record["started_at"])],
        ["Finished", formatting.timestamp(record["finished_at"])],
        ["Duration", formatting.seconds(record["duration_seconds"])],
    ]
    return Table(["Moment", "Value"], rows, [False, False])


def _timeline(record: Mapping[str, Any]) -> list[TimelineBar]:
    run_start = datetime.fromisoformat(record["started_at"])
    run_seconds = record["duration_seconds"]
    bars = []
    for step in record["steps"]:
        if not step.get("started_at") or not run_seconds:
            continue
        offset = (datetime.fromisoformat(step["started_at"]) - run_start).total_seconds()
        duration = step.get("duration_seconds") or 0.0
        offset_pct = min(max(100 * offset / run_seconds, 0.0), 100.0)
        width_pct = min(max(100 * duration / run_seconds, 0.5), 100.0 - offset_pct)
        label = f"+{formatting.seconds(offset)} · {formatting.seconds(duration)}"
        bars.append(TimelineBar(step["id"], step["status"], round(offset_pct, 2), round(width_pct, 2), label))
    return bars


def _step_detail(step: Mapping[str, Any], final_output: Any) -> StepDetail:
    who = step.get("agent") or step.get("tool") or ""
    data = step.get("data")
    output = step.get("output")
    if output and output == final_output:
        output = "(the summary at the top of this report)"
    elif output is not None and not isinstance(output, str):
        output = json.dumps(output, indent=2, ensure_ascii=False, default=str)
    return StepDetail(
        id=step["id"],
        heading=f"{step['id']} ({step['kind']}{', ' + who if who else ''})",
        status=step["status"],
        error=step.get("error") or "",
        output=formatting.excerpt(output, OUTPUT_EXCERPT_CHARS),
        data=""
        if data is None
        else formatting.excerpt(json.dumps(data, indent=2, ensure_ascii=False), OUTPUT_EXCERPT_CHARS),
        tool_calls=_tool_calls(step.get("tool_calls") or []),
    )


def _tool_calls(calls: list[Mapping[str, Any]]) -> Table | None:
    if not calls:
        return None
    rows = [
        [
            call["name"],
            call["status"],
            formatting.seconds(call.get("duration_seconds")),
            formatting.excerpt(json.dumps(call.get("arguments") or {}, ensure_ascii=False), 300),
            formatting.excerpt(call.get("output_excerpt"), 300),
        ]
        for call in calls
    ]
    columns = ["Tool", "Status", "Duration", "Arguments", "Output (excerpt)"]
    return Table(columns, rows, [False, False, True, False, False], status_column=1)
