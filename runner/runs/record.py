"""Building the run record (``runner/reports/report.schema.json``) from a finished run."""

from __future__ import annotations

import mimetypes
from typing import TYPE_CHECKING, Any

from runner.runs.types import STATUS_EXIT
from runner.store.runstore import now_iso

if TYPE_CHECKING:
    from runner.pipelines.planner import PlanOutcome
    from runner.runs.steps import RunContext

SCHEMA_VERSION = "runner.report/v1"
STEP_KEYS = (
    "id", "kind", "agent", "tool", "status", "output", "data", "error", "started_at",
    "duration_seconds", "usage", "model", "tool_calls", "artifacts",
)


def build_record(
    ctx: RunContext, *, status: str, error: str | None, output: Any, plan: PlanOutcome | None,
    started_at: str, duration: float, title: str,
) -> dict[str, Any]:
    """The JSON-able record every report format is rendered from."""
    from runner.reports.record import usage_rollups

    steps = [{k: record.get(k) for k in STEP_KEYS} for record in ctx.done.values()]
    for step in steps:
        step["tool_calls"] = step["tool_calls"] or []
        step["artifacts"] = step["artifacts"] or []
    usage = usage_rollups(steps)
    usage["total"]["tool_calls"] = ctx.budget.spent.tool_calls
    descriptions = {s.id: s.description for s in ctx.task.pipeline.steps} if ctx.task.pipeline else {}
    artifacts: list[dict[str, Any]] = []
    for step in steps:
        caption = descriptions.get(str(step["id"]))
        for path in step["artifacts"] or []:
            media_type = mimetypes.guess_type(path)[0] or "application/octet-stream"
            artifact = {"path": path, "media_type": media_type, "step": step["id"]}
            artifacts.append(artifact | {"caption": caption} if caption else artifact)
    tables = {sid: table for sid in ctx.task.report.tables if (table := _table(ctx.done.get(sid, {}).get("data")))}
    return {
        "schema_version": SCHEMA_VERSION,
        "run_id": ctx.run_id,
        "task": ctx.task.name,
        "title": title,
        "status": status,
        "stop_reason": error,
        "exit_code": STATUS_EXIT.get(status, 1),
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
    }


def _table(data: Any) -> dict[str, Any] | None:
    """A step's tabular data as ``{columns, rows}`` (data tools return records)."""
    if not isinstance(data, dict) or "columns" not in data:
        return None
    columns = list(data["columns"])
    if isinstance(data.get("records"), list):
        rows = [[record.get(c) for c in columns] for record in data["records"]]
    elif isinstance(data.get("rows"), list):
        rows = data["rows"]
    else:
        return None
    return {"columns": columns, "rows": rows}
