"""Building the report record (``runner/reports/report.schema.json``) from a finished run."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from runner.core.sources import Source
from runner.core.status import Status, exit_code
from runner.reports.artifacts import media_type_of
from runner.reports.record import SCHEMA_VERSION, call_rollups, usage_rollups
from runner.store.runstore import now_iso

if TYPE_CHECKING:
    from runner.pipelines.planner import PlanOutcome
    from runner.runs.context import RunContext


def build_record(
    ctx: RunContext, *, status: Status, error: str | None, error_kind: str | None, output: Any,
    plan: PlanOutcome | None, started_at: str, duration: float, title: str,
) -> dict[str, Any]:
    """The JSON-able record every report format is rendered from."""
    steps = [record.as_dict() for record in ctx.done.values()]
    calls = [c for c in ctx.store.model_calls(ctx.run_id) if c["status"] != "reserved"]
    usage = call_rollups(usage_rollups(steps), calls, (str(step["id"]) for step in steps))
    usage["total"]["tool_calls"] = ctx.budget.spent.tool_calls
    descriptions = {s.id: s.description for s in ctx.task.pipeline.steps} if ctx.task.pipeline else {}
    artifacts: list[dict[str, Any]] = []
    for step in steps:
        caption = descriptions.get(str(step["id"]))
        for path in step["artifacts"]:
            artifact = {"path": path, "media_type": media_type_of(path), "step": step["id"]}
            artifacts.append(artifact | {"caption": caption} if caption else artifact)
    tables, missing = report_tables(ctx)
    return {
        "schema_version": SCHEMA_VERSION,
        "run_id": ctx.run_id,
        "task": ctx.task.name,
        "title": title,
        "status": status,
        "stop_reason": error,
        "warnings": ctx.warnings + [w for step in ctx.done.values() for w in step.warnings] + missing,
        "exit_code": exit_code(status, error_kind),
        "started_at": started_at,
        "finished_at": now_iso(),
        "duration_seconds": round(duration, 3),
        "inputs": ctx.inputs,
        "config_hash": ctx.config_hash,
        "final_output": output,
        "plan": plan.plan if plan else None,
        "replans": plan.replans if plan else [],
        "steps": steps,
        "usage": usage,
        "caps": ctx.budget.caps.as_dict(),
        "artifacts": artifacts,
        "previous_run": (
            {k: ctx.previous[k] for k in ("run_id", "finished_at")} | {"final_output": ctx.previous["outputs"]}
            if ctx.previous else None
        ),
        "tables": tables,
        "sources": _sources(ctx),
        "columns": {name: dataclasses.asdict(style) for name, style in ctx.task.report.columns.items()},
    }


def _sources(ctx: RunContext) -> list[dict[str, Any]]:
    """Every source the steps' tools found, once (a page both found by a search and browsed is
    one source), with the steps that found it."""
    found: dict[tuple[str, ...], dict[str, Any]] = {}
    for record in ctx.done.values():
        for source in record.sources:
            place = "" if source.kind == "web" else source.position  # a web result's position is its date
            entry = found.setdefault((source.kind, source.location, source.section, place), source.as_dict() | {"steps": []})
            entry.update({k: v for k, v in source.as_dict().items() if v and not entry.get(k)})
            entry["citation"] = Source.from_dict(entry).citation()
            if record.id not in entry["steps"]:
                entry["steps"].append(record.id)
    return list(found.values())


def report_tables(ctx: RunContext) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """The tables ``report.tables`` names, by step id, and a warning for each one that cannot
    be shown (the step did not complete, or its data is no table): never left out unsaid."""
    descriptions = {s.id: s.description for s in ctx.task.pipeline.steps} if ctx.task.pipeline else {}
    tables: dict[str, dict[str, Any]] = {}
    missing: list[str] = []
    for sid in ctx.task.report.tables:
        done = ctx.done.get(sid)
        table = _table(done.data) if done is not None else None
        if table is None:
            if done is None:
                why = "it did not run"
            elif done.status != "completed":
                why = f"it ended {done.status}"
            else:
                why = "its result is not a table (a tool returning rows or records, such as query_table)"
            missing.append(f"report.tables: step '{sid}' is not shown: {why}")
            continue
        tables[sid] = table | ({"title": descriptions[sid]} if descriptions.get(sid) else {})
    return tables, missing


def _table(data: Any) -> dict[str, Any] | None:
    """A step's tabular data as ``{columns, rows}`` (data tools return records; ``load_table``
    returns a summary whose first rows are shown, captioned with the table's size)."""
    if not isinstance(data, dict) or "columns" not in data:
        return None
    columns = list(data["columns"])
    if isinstance(data.get("records"), list):
        rows = [[record.get(c) for c in columns] for record in data["records"]]
    elif isinstance(data.get("rows"), list):
        rows = data["rows"]
    elif isinstance(data.get("head"), list) and isinstance(data.get("rows"), int):
        head = [[record.get(c) for c in columns] for record in data["head"] if isinstance(record, dict)]
        caption = f"The first {len(head)} of {data['rows']} rows of table '{data.get('table')}'"
        return {"columns": columns, "rows": head, "caption": caption}
    else:
        return None
    return {"columns": columns, "rows": rows}
