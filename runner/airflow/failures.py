"""What a failed task's log says: the run's status, error kind and message; a batch's rows left.

The task log is where an Airflow user looks first, and the run store (with the full story)
sits on one worker's disk, so the message itself carries the reason. Every message passes
through :func:`runner.redact.redact` (the key itself is also masked by Airflow) and is
kept short. No Airflow imports here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from runner.config.specs import CAP_NAMES
from runner.redact import redact

if TYPE_CHECKING:
    from runner.batch.journal import JournalRow
    from runner.batch.records import BatchRecords

MESSAGE_CHARS = 500
_EXAMPLES = 3


def short(text: Any, secrets: Iterable[str | None] = (), limit: int = MESSAGE_CHARS) -> str:
    """``text`` on one line, credentials redacted, at most ``limit`` characters."""
    flat = " ".join(redact(str(text), secrets).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def run_failure(manifest: Mapping[str, Any]) -> str:
    """``runner run R ended failed (exit 1, 0.001200 USD): rate_limited: model endpoint ...; report: P``."""
    kind = manifest.get("error_kind") or manifest.get("status")
    error = manifest.get("error") or "(no error message recorded)"
    return (
        f"runner run {manifest.get('run_id')} ended {manifest.get('status')} (exit {manifest.get('exit_code')}, "
        f"{float(manifest.get('cost_usd') or 0):.6f} USD): {kind}: {short(error)}; report: {manifest.get('report_path')}"
    )


@dataclass(frozen=True)
class RowsLeft:
    """The rows of a batch that are not done, and how many another try could still finish."""

    rows: int
    done: int
    failed: int
    invalid: int
    not_run: int
    retryable: int

    @property
    def not_done(self) -> int:
        return self.rows - self.done


def rows_left(batch: BatchRecords) -> RowsLeft:
    """Count a batch's rows by outcome, in one pass over its records.

    Retryable: failed rows the engine marked retryable (their attempts are used up for this
    try), and rows not run for any reason but a cap (a cap counts the money already spent,
    so another try meets it again).
    """
    counts = {"rows": 0, "done": 0, "failed": 0, "invalid": 0, "not_run": 0, "retryable": 0}
    for record in batch.records():
        counts["rows"] += 1
        # pending or running after a try ended: that try did not get to the row
        counts[record.status if record.status in ("done", "failed", "invalid") else "not_run"] += 1
        counts["retryable"] += _retryable(record)
    return RowsLeft(**counts)


def _retryable(record: JournalRow) -> bool:
    if record.status == "failed":
        return record.retryable
    if record.status in ("done", "invalid"):
        return False
    return record.error_kind not in CAP_NAMES


def cap_stop(batch: Mapping[str, Any] | None) -> str:
    """``; stopped: <reason>`` when a cap stopped the batch whose manifest (or batch report's
    ``run`` entry) is ``batch``, else empty. The reason names the cap, its limit and spend, and
    for a budget over time when its window reopens: no retry can run those rows before then."""
    if batch and batch.get("stop_kind") in CAP_NAMES:
        return f"; stopped: {batch.get('stop_reason')}"
    return ""


def rows_failure(report: Mapping[str, Any], left: RowsLeft) -> str:
    """``3 of 40 row(s) not done: failed 2 (rate_limited: 2, e.g. T-1, T-7: ...); not run 1 (...)``.

    ``report`` is a :func:`runner.batch.summary.batch_report`; its errors and reasons name
    example row ids, so a user can find the rows in the output without the journal.
    """
    parts = []
    for kind, group in (report.get("errors_by_kind") or {}).items():
        ids = ", ".join(map(str, group.get("example_ids", [])[:_EXAMPLES]))
        parts.append(f"{kind}: {group.get('count')} (e.g. {ids}: {short(group.get('example'), limit=200)})")
    for reason, group in (report.get("not_run") or {}).items():
        ids = ", ".join(map(str, group.get("example_ids", [])[:_EXAMPLES]))
        parts.append(f"not run: {group.get('count')} ({short(reason, limit=200)}; e.g. {ids})")
    counts = f"failed {left.failed}, invalid {left.invalid}, not run {left.not_run}"
    return f"{left.not_done} of {left.rows} row(s) not done ({counts}): " + "; ".join(parts)
