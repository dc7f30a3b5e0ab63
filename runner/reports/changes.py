"""What changed since the previous run: field by field for structured outputs, a diff for text."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from runner.reports import formatting

MAX_DIFF_LINES = 80
MAX_FIELDS = 60
MAX_DIFF_INPUT_LINES = 2000  # difflib is slow on huge inputs; later lines are not compared


@dataclass(frozen=True)
class FieldChange:
    """One value that differs between the previous run and this one."""

    name: str
    before: str
    after: str
    delta: str = ""


@dataclass(frozen=True)
class Changes:
    """The difference between the previous run's output and this run's."""

    previous_run_id: str
    previous_finished_at: str
    fields: list[FieldChange] = field(default_factory=list)
    unchanged_fields: int = 0
    diff: list[str] = field(default_factory=list)
    diff_truncated: int = 0

    @property
    def identical(self) -> bool:
        """True when nothing at all differs."""
        return not self.fields and not self.diff


def compare_runs(record: Mapping[str, Any]) -> Changes | None:
    """The changes from ``record['previous_run']`` to ``record``; None without a previous run."""
    previous = record.get("previous_run")
    if not previous:
        return None
    before, after = previous.get("final_output"), record.get("final_output")
    fields = _run_fields(previous, record)
    unchanged = 0
    diff: list[str] = []
    if isinstance(before, Mapping) and isinstance(after, Mapping):
        output_fields, unchanged = _compare_objects(_flatten(before), _flatten(after))
        fields += output_fields
    elif before != after:
        diff = _text_diff(_as_text(before), _as_text(after))
    return Changes(
        previous_run_id=previous["run_id"],
        previous_finished_at=formatting.timestamp(previous["finished_at"]),
        fields=fields[:MAX_FIELDS],
        unchanged_fields=unchanged,
        diff=diff[:MAX_DIFF_LINES],
        diff_truncated=max(0, len(diff) - MAX_DIFF_LINES),
    )


def _run_fields(previous: Mapping[str, Any], record: Mapping[str, Any]) -> list[FieldChange]:
    """Status and cost, when the previous run recorded them and they differ."""
    changes = []
    if previous.get("status") and previous["status"] != record["status"]:
        changes.append(FieldChange("run status", previous["status"], record["status"]))
    cost_now = ((record.get("usage") or {}).get("total") or {}).get("cost_usd")
    if previous.get("cost_usd") is not None and cost_now is not None and previous["cost_usd"] != cost_now:
        delta = cost_now - previous["cost_usd"]
        changes.append(
            FieldChange("run cost", formatting.usd(previous["cost_usd"]), formatting.usd(cost_now), _signed_usd(delta))
        )
    return changes


def _flatten(value: Mapping[str, Any], prefix: str = "", depth: int = 3) -> dict[str, Any]:
    """Nested objects as dotted keys, down to ``depth`` levels; deeper values stay whole."""
    flat: dict[str, Any] = {}
    for key, item in value.items():
        name = f"{prefix}{key}"
        if isinstance(item, Mapping) and item and depth > 1:
            flat.update(_flatten(item, f"{name}.", depth - 1))
        else:
            flat[name] = item
    return flat


def _compare_objects(before: Mapping[str, Any], after: Mapping[str, Any]) -> tuple[list[FieldChange], int]:
    changes, unchanged = [], 0
    for name in [*before, *(key for key in after if key not in before)]:
        old, new = before.get(name), after.get(name)
        if old == new and (name in before) == (name in after):
            unchanged += 1
            continue
        old_text = formatting.cell(old) if name in before else "(absent)"
        new_text = formatting.cell(new) if name in after else "(absent)"
        changes.append(FieldChange(name, old_text, new_text, _delta(old, new)))
    return changes, unchanged


def _delta(old: Any, new: Any) -> str:
    if not (formatting.is_number(old) and formatting.is_number(new)):
        return ""
    change = new - old
    sign = "+" if change >= 0 else "−"
    relative = f" ({sign}{abs(change) / abs(old):.1%})" if old else ""
    return f"{sign}{formatting.cell(abs(change))}{relative}"


def _signed_usd(amount: float) -> str:
    return ("+" if amount >= 0 else "−") + formatting.usd(abs(amount))


def _as_text(value: Any) -> str:
    return "" if value is None else value if isinstance(value, str) else formatting.cell(value)


def _text_diff(before: str, after: str) -> list[str]:
    import difflib  # only when there is an earlier output to compare with

    old, new = before.splitlines()[:MAX_DIFF_INPUT_LINES], after.splitlines()[:MAX_DIFF_INPUT_LINES]
    lines = difflib.unified_diff(old, new, "previous", "this run", n=1, lineterm="")
    return [line for line in lines if not line.startswith(("---", "+++"))]
