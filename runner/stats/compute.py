"""From the run store's rows to figures: per task (runs), agent (agent steps), model (model
calls) and tool (tool calls and tool steps), a trend per task, the window before, and the
budget warnings (``warn_at`` crossings) the runs met in the window.

Every group is summarised the same way (:class:`Summary`): how many, the status mix, the
success rate over what finished, median and p95 duration, cost and tokens per item, tool
failure rate and cap hits. What does not apply to a dimension is ``None``.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from runner.core.status import FINAL_STATUSES
from runner.stats.window import Bucket, Window, bucket_start
from runner.store.runstore import RunStore

Row = dict[str, Any]
TREND_METRICS = ("runs", "success_rate", "cost_per_run", "tokens_per_run", "duration_p95")
CHANGE_METRICS = ("runs", "success_rate", "cost_per", "tokens_per", "duration_median", "duration_p95", "tool_failure_rate")


@dataclass(frozen=True)
class Item:
    """One run, step or call: ``ok`` is None while it has not finished."""

    status: str
    ok: bool | None
    duration: float | None = None
    cost: float = 0.0
    tokens: int = 0
    cap: str | None = None
    reasoning: int = 0  # the part of the output tokens spent reasoning
    cache_write: int = 0  # the part of the input tokens written to the prompt cache


@dataclass(frozen=True)
class Summary:
    """The figures of one task, agent, model or tool over the window."""

    name: str
    count: int
    statuses: dict[str, int]
    success_rate: float | None
    duration_median: float | None
    duration_p95: float | None
    cost_total: float
    cost_per: float | None
    tokens_per: float | None
    tool_calls: int | None = None
    tool_failure_rate: float | None = None
    cap_hits: dict[str, int] = field(default_factory=dict)
    reasoning_tokens: int = 0  # of the tokens, output spent reasoning (reasoning models), in total
    cache_write_tokens: int = 0  # of the tokens, input written to the prompt cache (billed at the cache-write rate), in total


@dataclass(frozen=True)
class TrendPoint:
    """A task's runs that started in one bucket (an hour, day or week)."""

    start: str
    runs: int
    success_rate: float | None
    cost_per_run: float | None
    tokens_per_run: float | None
    duration_p95: float | None


@dataclass(frozen=True)
class Stats:
    """Everything ``runner stats`` shows."""

    window: Window
    bucket: Bucket
    task: str | None
    tasks: list[Summary]
    agents: list[Summary]
    models: list[Summary]
    tools: list[Summary]
    trends: dict[str, list[TrendPoint]]
    previous: dict[str, Summary]
    budget_warnings: list[Row] = field(default_factory=list)  # warn_at crossings met in the window, oldest first

    def change(self, task: Summary, metric: str) -> tuple[Any, Any, float | None]:
        """``(now, before, now / before)`` of one task's metric against the window before."""
        before_summary = self.previous.get(task.name)
        now = task.count if metric == "runs" else getattr(task, metric)
        before = None if before_summary is None else before_summary.count if metric == "runs" else getattr(before_summary, metric)
        ratio = now / before if isinstance(now, int | float) and isinstance(before, int | float) and before else None
        return now, before, ratio

    def as_dict(self) -> dict[str, Any]:
        return {
            "window": {"since": self.window.iso()[0], "until": self.window.iso()[1], "bucket": self.bucket, "task": self.task},
            "previous_window": dict(zip(("since", "until"), self.window.previous().iso(), strict=True)),
            "tasks": [_with_changes(self, s) for s in self.tasks],
            "agents": [asdict(s) for s in self.agents],
            "models": [asdict(s) for s in self.models],
            "tools": [asdict(s) for s in self.tools],
            "trends": {task: [asdict(p) for p in points] for task, points in self.trends.items()},
            "budget_warnings": self.budget_warnings,
        }


def compute_stats(store: RunStore, window: Window, bucket: Bucket | None = None, task: str | None = None) -> Stats:
    """The stats of the runs that started in ``window`` (and of the window before, for comparison)."""
    bucket = bucket or window.default_bucket()
    since, until = window.iso()
    runs, steps = store.runs_between(since, until, task), store.steps_between(since, until, task)
    calls, tool_calls = store.model_calls_between(since, until, task), store.tool_calls_between(since, until, task)
    before = window.previous().iso()
    previous_runs, previous_tools = store.runs_between(*before, task), store.tool_calls_between(*before, task)
    agent_steps = [s for s in steps if s["kind"] != "tool" and s["agent"]]
    return Stats(
        window=window, bucket=bucket, task=task,
        tasks=_by(runs, "task", _run_item, tool_calls, "task"),
        agents=_by(agent_steps, "agent", _step_item, tool_calls, "agent"),
        models=_by(calls, "model", _call_item),
        tools=_tools(tool_calls, [s for s in steps if s["kind"] == "tool" and s["tool"]]),
        trends=_trends(runs, bucket),
        previous={s.name: s for s in _by(previous_runs, "task", _run_item, previous_tools, "task")},
        budget_warnings=store.budget_warnings.between(since, until, task),
    )


def summarise(name: str, items: list[Item], tool_items: list[Item] | None = None) -> Summary:
    """One group's :class:`Summary`; ``tool_items`` are the tool calls made inside it."""
    finished = [i for i in items if i.ok is not None]
    durations = sorted(i.duration for i in items if i.duration is not None)
    cost = sum(i.cost for i in items)
    failures = sum(1 for t in tool_items or () if t.ok is False)
    return Summary(
        name=name, count=len(items), statuses=dict(Counter(i.status for i in items).most_common()),
        success_rate=_rate(sum(1 for i in finished if i.ok), len(finished)),
        duration_median=statistics.median(durations) if durations else None, duration_p95=percentile(durations, 95),
        cost_total=round(cost, 8), cost_per=round(cost / len(items), 8) if items else None,
        tokens_per=round(sum(i.tokens for i in items) / len(items), 1) if items else None,
        tool_calls=len(tool_items) if tool_items is not None else None,
        tool_failure_rate=_rate(failures, len(tool_items)) if tool_items is not None else None,
        cap_hits=dict(Counter(i.cap for i in items if i.cap).most_common()),
        reasoning_tokens=sum(i.reasoning for i in items), cache_write_tokens=sum(i.cache_write for i in items),
    )


def percentile(ordered: list[float], pct: float) -> float | None:
    """The nearest-rank percentile of sorted values (p95 of 20 values is the 19th)."""
    if not ordered:
        return None
    return ordered[max(math.ceil(pct / 100 * len(ordered)) - 1, 0)]


def _by(
    rows: list[Row], key: str, to_item: Callable[[Row], Item], tool_rows: list[Row] | None = None, tool_key: str = ""
) -> list[Summary]:
    groups: dict[str, list[Item]] = defaultdict(list)
    for row in rows:
        groups[str(row[key])].append(to_item(row))
    tools: dict[str, list[Item]] = defaultdict(list)
    for row in tool_rows or ():
        tools[str(row[tool_key])].append(_tool_item(row))
    summaries = [summarise(name, items, tools.get(name, []) if tool_rows is not None else None) for name, items in groups.items()]
    return sorted(summaries, key=lambda s: (-s.count, s.name))


def _tools(calls: list[Row], tool_steps: list[Row]) -> list[Summary]:
    groups: dict[str, list[Item]] = defaultdict(list)
    for row in calls:
        groups[row["name"]].append(_tool_item(row))
    for row in tool_steps:  # a pipeline's tool step is a call too
        ok = None if row["status"] in ("running", "skipped") else row["status"] == "completed"
        label = row["status"] if ok is None else "ok" if ok else "error"
        groups[row["tool"]].append(Item(label, ok, row["duration_seconds"]))
    summaries = [summarise(name, items, items) for name, items in groups.items()]
    return sorted(summaries, key=lambda s: (-s.count, s.name))


def _trends(runs: list[Row], bucket: Bucket) -> dict[str, list[TrendPoint]]:
    buckets: dict[str, dict[str, list[Item]]] = defaultdict(lambda: defaultdict(list))
    for row in runs:
        start = bucket_start(datetime.fromisoformat(row["started_at"]), bucket).isoformat(timespec="seconds")
        buckets[row["task"]][start].append(_run_item(row))
    trends: dict[str, list[TrendPoint]] = {}
    for task, by_start in sorted(buckets.items()):
        trends[task] = [_point(start, items) for start, items in sorted(by_start.items())]
    return trends


def _point(start: str, items: list[Item]) -> TrendPoint:
    summary = summarise("", items)
    return TrendPoint(start, summary.count, summary.success_rate, summary.cost_per, summary.tokens_per, summary.duration_p95)


def _run_item(row: Row) -> Item:
    finished = row["status"] in FINAL_STATUSES
    duration = _seconds_between(row["started_at"], row["finished_at"]) if finished else None
    return Item(
        row["status"], row["status"] == "completed" if finished else None, duration, float(row["cost_usd"] or 0),
        int(row["input_tokens"] or 0) + int(row["output_tokens"] or 0), row["error_kind"] if row["status"] == "capped" else None,
        *_token_parts(row),
    )


def _step_item(row: Row) -> Item:
    finished = row["status"] in FINAL_STATUSES
    return Item(
        row["status"], row["status"] == "completed" if finished else None, row["duration_seconds"],
        float(row["cost_usd"] or 0), int(row["input_tokens"] or 0) + int(row["output_tokens"] or 0),
        row["error_kind"] if row["status"] == "capped" else None, *_token_parts(row),
    )


def _call_item(row: Row) -> Item:
    ok = None if row["status"] == "reserved" else row["status"] == "ok"
    return Item(row["status"], ok, row["latency_seconds"], float(row["cost_usd"] or 0),
                int(row["input_tokens"] or 0) + int(row["output_tokens"] or 0), None, *_token_parts(row))


def _token_parts(row: Row) -> tuple[int, int]:
    """``(reasoning, cache writes)``: the parts of a row's output and input tokens :class:`Item` keeps."""
    return int(row.get("reasoning_tokens") or 0), int(row.get("cache_write_tokens") or 0)


def _tool_item(row: Row) -> Item:
    return Item(row["status"], row["status"] == "ok", row["duration_seconds"])


def _seconds_between(start: str | None, end: str | None) -> float | None:
    if not start or not end:
        return None
    return max((datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds(), 0.0)


def _rate(part: int, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None


def _with_changes(stats: Stats, summary: Summary) -> dict[str, Any]:
    changes = {}
    for metric in CHANGE_METRICS:
        now, before, ratio = stats.change(summary, metric)
        changes[metric] = {"now": now, "before": before, "ratio": round(ratio, 4) if ratio is not None else None}
    return {**asdict(summary), "vs_previous": changes}
