"""What a batch did: the engine's :class:`BatchSummary`, and the batch report built from the journal.

:func:`batch_report` collects the data first (counts by status, spend, per-row cost
distribution, slowest rows, errors grouped by kind with example ids, rows not run and why,
the budget warnings the rows' calls made, each with its row; rows run on a fallback model)
as a JSON-ready dict; :func:`render_markdown` and :func:`write_reports` render it.
"""

from __future__ import annotations

import heapq
import json
import math
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from runner.batch.journal import STATUSES, JournalRow
from runner.batch.records import BatchRecords
from runner.config.specs import CAP_FIGURES, CAP_NAMES
from runner.core.usage import Usage, cache_hit_rate
from runner.errors import EXIT_CAPPED, EXIT_FAILED, EXIT_OK
from runner.locations import Location, write_text

_EXAMPLE_IDS = 5
DEGRADED_ROWS_LISTED = 200
"""Rows the batch report lists one by one as run on a fallback model (all are counted)."""


@dataclass(frozen=True)
class BatchSummary:
    """The outcome of one ``run_batch`` call (counts cover the whole journal, resumes included)."""

    batch_id: str
    counts: dict[str, int]
    usage: Usage  # every row, every attempt
    elapsed_seconds: float
    stop_reason: str | None = None  # why rows were left not run, if any
    stop_kind: str | None = None  # a cap name (max_cost_usd, ...) or 'failure_policy'
    interrupted_rows: int = 0  # rows found running after a crash, on this resume
    attempts_here: int = 0  # rows attempted by this call
    pending: tuple[str, ...] = ()  # provider batches still out (``--via batch-api`` without waiting): collect by running again
    not_retried: dict[str, int] = field(default_factory=dict)  # failed rows a rerun would not retry, by why (engine.closing_figures)
    outside_selection: int = 0  # rows a trial run (--limit, --sample) did not select, not done yet
    selection: tuple[int, ...] | None = None  # a trial's row numbers (None: every row)
    notes: tuple[str, ...] = ()  # what the command should tell besides the counts (answers kept, flags with nothing to do)
    fingerprint: str | None = None  # the configuration the rows run under (runner.batch.fingerprint), short

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def exit_code(self) -> int:
        """0 all done; 3 stopped by a batch cap; 1 any row failed, invalid or not run."""
        if self.stop_kind in CAP_NAMES:
            return EXIT_CAPPED
        unfinished = self.total - self.counts.get("done", 0) - self.outside_selection
        return EXIT_FAILED if unfinished else EXIT_OK

    def as_dict(self) -> dict[str, Any]:
        fields = {**asdict(self), "total": self.total, "exit_code": self.exit_code}
        fields["usage"] = self.usage.as_dict()
        fields["selection"] = None if self.selection is None else len(self.selection)
        return fields

    @property
    def did_nothing(self) -> bool:
        """Nothing was attempted, found interrupted or left out at the provider: a rerun with nothing to do."""
        return not (self.attempts_here or self.interrupted_rows or self.pending)


def keep_or_write_report(report: dict[str, Any], directory: Location, summary: BatchSummary) -> Location:
    """Write the batch report, unless this run did nothing and the report is there already: a rerun
    with nothing to do leaves the figures of the run that did the work (its ``run`` section)."""
    from runner.locations import read_text

    markdown = directory / "batch_report.md"
    if summary.did_nothing:
        try:
            earlier = json.loads(read_text(directory / "batch_report.json"))
        except (OSError, ValueError):
            earlier = None
        if isinstance(earlier, dict) and earlier.get("counts") == report["counts"]:
            return markdown
    written, _ = write_reports(report, directory)
    return written


def batch_report(journal: BatchRecords, summary: BatchSummary | None = None, *, slowest: int = 5) -> dict[str, Any]:
    """The batch report as a JSON-ready dict, read from the journal in one streaming pass."""
    counts: Counter[str] = Counter({status: 0 for status in STATUSES})
    costs: list[float] = []
    durations: list[tuple[float, int, str | None]] = []  # a min-heap of the slowest rows
    errors: dict[str, dict[str, Any]] = defaultdict(lambda: {"count": 0, "example_ids": [], "example": None})
    not_run: dict[str, dict[str, Any]] = defaultdict(lambda: {"count": 0, "example_ids": []})
    budget_warnings: dict[tuple[str, str, float], dict[str, Any]] = {}
    degraded: dict[str, Any] = {"rows": 0, "listed": []}
    used = Usage()
    for record in journal.records():
        counts[record.status] += 1
        for warning in record.budget_warnings:  # each made once, by the row whose call crossed it
            key = (warning.window, warning.cap, warning.threshold)
            budget_warnings.setdefault(key, {**warning.as_dict(), "row_id": record.id, "row": record.number})
        _add_degraded(degraded, record)
        used += record.usage
        if record.attempts:
            costs.append(record.usage.cost_usd)
        if record.duration_seconds is not None:
            item = (record.duration_seconds, -record.number, record.id)
            if len(durations) < slowest:
                heapq.heappush(durations, item)
            else:
                heapq.heappushpop(durations, item)
        if record.status in ("failed", "invalid"):
            _add_example(errors[record.error_kind or "unknown"], record.id, record.number, record.error)
        elif record.status == "not_run":
            _add_example(not_run[record.error or "not run"], record.id, record.number, None)
    durations.sort(reverse=True)
    return {
        "batch_id": journal.batch_id,
        "task": journal.meta.get("task"),
        "input": {"path": journal.meta.get("input_path"), "sha256": journal.meta.get("input_sha256")},
        "rows": sum(counts.values()),
        "counts": dict(counts),
        "cost_usd": round(sum(costs), 8),
        "tokens": used.total_tokens,
        "input_tokens": used.input_tokens,
        "output_tokens": used.output_tokens,
        "cached_input_tokens": used.cached_input_tokens,
        "cache_write_tokens": used.cache_write_tokens,
        "reasoning_tokens": used.reasoning_tokens,
        "cache_hit_rate": _rounded(cache_hit_rate(used.input_tokens, used.cached_input_tokens)),
        "cost_per_row_usd": _distribution(costs),
        "slowest_rows": [
            {"id": row_id, "row": -negative_row, "seconds": round(took, 3)} for took, negative_row, row_id in durations
        ],
        "errors_by_kind": dict(sorted(errors.items(), key=lambda kv: -kv[1]["count"])),
        "not_run": dict(not_run),
        "budget_warnings": [budget_warnings[key] for key in sorted(budget_warnings)],
        "degraded": degraded,
        "run": summary.as_dict() if summary else None,
    }


def render_markdown(report: dict[str, Any]) -> str:
    """``batch_report.md``: counts, spend, slowest rows, errors by kind, rows not run, budget warnings,
    rows run on a fallback model."""
    from runner.reports.markdown import table
    from runner.reports.tables import Table

    def section(heading: str, columns: list[str], rows: list[list[Any]], numeric: list[bool]) -> list[str]:
        cells = [[_short(c) for c in row] for row in rows]
        return [f"## {heading}", "", table(Table(columns, cells, numeric)), ""]

    lines = [f"# Batch {report['batch_id']}: {report['task']}", ""]
    lines += [f"Input: `{report['input']['path']}` (sha256 `{(report['input']['sha256'] or '')[:16]}`)", ""]
    counts = [[status, str(n)] for status, n in report["counts"].items() if n] + [["**total**", f"**{report['rows']}**"]]
    lines += [table(Table(["status", "rows"], counts, [False, True])), ""]
    lines += [f"Spend: ${report['cost_usd']:.4f}, {report['tokens']:,} tokens.", ""]
    if report["cache_hit_rate"] is not None:
        hit, sent = 100 * report["cache_hit_rate"], report["input_tokens"]
        lines += [f"Prompt cache: {hit:.1f}% of {sent:,} input tokens served from the endpoint's cache.", ""]
    if report.get("cache_write_tokens"):
        lines += [f"Cache writes: {report['cache_write_tokens']:,} input tokens written to the endpoint's cache (billed at its cache-write price).", ""]
    if report.get("reasoning_tokens"):
        lines += [f"Reasoning: {report['reasoning_tokens']:,} of {report['output_tokens']:,} output tokens (billed as output).", ""]
    cost = report["cost_per_row_usd"]
    if cost["rows"]:
        stats = [["USD", *(f"{cost[k]:.6f}" for k in ("mean", "p50", "p95", "max"))]]
        lines += [table(Table(["cost per row", "mean", "p50", "p95", "max"], stats, [False, True, True, True, True])), ""]
    if report["slowest_rows"]:
        rows = [[r["id"], r["row"], f"{r['seconds']:.3f}"] for r in report["slowest_rows"]]
        lines += section("Slowest rows", ["id", "row", "seconds"], rows, [False, True, True])
    if report["errors_by_kind"]:
        rows = [[k, g["count"], ", ".join(map(str, g["example_ids"])), g["example"]] for k, g in report["errors_by_kind"].items()]
        lines += section("Errors by kind", ["kind", "rows", "example ids", "example"], rows, [False, True, False, False])
    if report["not_run"]:
        rows = [[reason, g["count"], ", ".join(map(str, g["example_ids"]))] for reason, g in report["not_run"].items()]
        lines += section("Rows not run", ["reason", "rows", "example ids"], rows, [False, True, False])
    if report.get("budget_warnings"):
        rows = [[w["scope"], f"{w['threshold']:.0%} of {w['cap']}={w['limit']:g}", _figure(w["cap"], w["spent"]),
                 w["row_id"] or f"row {w['row']}"] for w in report["budget_warnings"]]  # fmt: skip
        lines += section("Budget warnings", ["budget window", "passed", "spent then", "row"], rows, [False, False, True, False])
    lines += _degraded_section(report.get("degraded") or {}, section)
    if report.get("ledger"):
        ledger = report["ledger"]
        rows = [[cap, _figure(cap, limit), _figure(cap, _used(cap, ledger["spent"])), _figure(cap, _used(cap, ledger["reserved"]))]
                for cap, limit in ledger["caps"].items()]  # fmt: skip
        lines += section(
            f"Batch caps, shared by every shard (ledger `{ledger['scope']}`)", ["cap", "limit", "spent", "held"], rows,
            [False, True, True, True],
        )
        lines += ["Held: calls in flight when the figures were read, or left by a worker that died (counted at their "
                  "worst case).", ""]  # fmt: skip
        lines += _dead_holders(ledger)
    return "\n".join(lines)


def _add_degraded(degraded: dict[str, Any], record: JournalRow) -> None:
    """Count a row whose run called a fallback model, and list it while the list is short."""
    if not record.degraded:
        return
    degraded["rows"] += 1
    if len(degraded["listed"]) < DEGRADED_ROWS_LISTED:
        degraded["listed"] += [
            {"id": record.id, "row": record.number, "status": record.status} | d.as_dict() for d in record.degraded
        ]


def _degraded_section(degraded: dict[str, Any], section: Callable[..., list[str]]) -> list[str]:
    """Rows run on a fallback model: one line per row and step, and how many there were."""
    if not degraded.get("rows"):
        return []
    rows = [[d["id"], d["row"], d["status"], d["step"], d["agent"], d["model"], d["fallback_model"],
             f"{d['budget']} ({d['threshold']:.0%})", d["first_call"]] for d in degraded["listed"]]  # fmt: skip
    columns = ["id", "row", "status", "step", "agent", "model", "ran on", "budget (threshold)", "from call"]
    lines = section(f"Rows run on a fallback model ({degraded['rows']})", columns, rows,
                    [False, True, False, False, False, False, False, False, True])  # fmt: skip
    listed = len({d["row"] for d in degraded["listed"]})
    if listed < degraded["rows"]:
        lines += [f"The first {listed} of {degraded['rows']} rows are listed; each row's run report names its degraded steps.", ""]
    return lines


def _dead_holders(ledger: dict[str, Any]) -> list[str]:
    """What workers that died still hold: a line, or none when they hold nothing."""
    held = ledger.get("held_by_dead") or {}
    if not held.get("model_calls"):
        return []
    who = ", ".join(ledger.get("dead_holders") or [])
    return [
        f"Held by workers that died ({who}): {held['model_calls']} call(s), ${float(held.get('cost_usd', 0)):.6f} at "
        "their worst case. They stay counted (the endpoint may have billed them) until the rows they ran are "
        "resumed, whose runs carry them forward as spend.",
        "",
    ]


def _used(cap: str, usage: dict[str, Any]) -> float:
    return float(usage.get(CAP_FIGURES.get(cap, ""), 0) or 0)


def _figure(cap: str, value: float) -> str:
    return f"${value:.6f}" if cap == "max_cost_usd" else f"{int(value):,}"


def write_reports(report: dict[str, Any], directory: Location) -> tuple[Location, Location]:
    """Write ``batch_report.md`` and ``batch_report.json`` into ``directory`` (a local directory,
    atomically, or a URL: see :mod:`runner.locations`)."""
    markdown, data = directory / "batch_report.md", directory / "batch_report.json"
    write_text(markdown, render_markdown(report))
    write_text(data, json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    return markdown, data


def _add_example(group: dict[str, Any], row_id: str | None, number: int, error: str | None) -> None:
    group["count"] += 1
    if len(group["example_ids"]) < _EXAMPLE_IDS:
        group["example_ids"].append(row_id if row_id is not None else f"row {number}")
    if "example" in group and group["example"] is None:
        group["example"] = error


def _distribution(values: list[float]) -> dict[str, float | int]:
    if not values:
        return {"rows": 0, "mean": 0.0, "p50": 0.0, "p95": 0.0, "max": 0.0}
    ordered = sorted(values)
    return {
        "rows": len(ordered),
        "mean": round(sum(ordered) / len(ordered), 8),
        "p50": round(_percentile(ordered, 50), 8),
        "p95": round(_percentile(ordered, 95), 8),
        "max": round(ordered[-1], 8),
    }


def _percentile(ordered: list[float], percent: float) -> float:
    """Nearest-rank percentile of sorted values."""
    rank = max(1, math.ceil(percent / 100 * len(ordered)))
    return ordered[rank - 1]


def _short(value: Any) -> str:
    text = "" if value is None else " ".join(str(value).split())
    return text if len(text) <= 120 else text[:117] + "..."


def _rounded(rate: float | None) -> float | None:
    return None if rate is None else round(rate, 4)
