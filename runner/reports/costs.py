"""Where the money and tokens went: breakdown tables, caps against usage, a cost-by-step chart."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from runner.core.usage import cache_hit_rate
from runner.reports import charts, formatting
from runner.reports.tables import Table

COST_CHART_KEY = "report:cost_by_step.png"
"""Key of the generated cost-by-step chart in ``images`` / ``artifacts_rel`` (never a workspace path)."""
COST_CHART_CAPTION = "Cost by step (USD)"
NEAR_LIMIT = 0.8

_CAP_USAGE = {
    "max_steps": ("Model calls", "model_calls"),
    "max_tool_calls": ("Tool calls", "tool_calls"),
    "max_input_tokens": ("Input tokens", "input_tokens"),
    "max_output_tokens": ("Output tokens", "output_tokens"),
    "max_tokens": ("Total tokens", "total_tokens"),
    "max_cost_usd": ("Cost", "cost_usd"),
    "max_wall_seconds": ("Wall time", "duration_seconds"),
}


@dataclass(frozen=True)
class CapUse:
    """One limit next to what the run used of it; ``state`` is ok, near or reached."""

    cap: str
    label: str
    limit: str
    used: str
    fraction: float | None
    state: str

    @property
    def percent(self) -> str:
        """The share of the limit used, for a person."""
        return "—" if self.fraction is None else f"{100 * self.fraction:.0f}%"


def breakdown(rollups: Mapping[str, Mapping[str, Any]], *, name_header: str, total_cost: float) -> Table:
    """A usage rollup (by agent or by model) as a table, most expensive first."""
    ordered = sorted(rollups.items(), key=lambda item: -item[1]["cost_usd"])
    rows = [
        [
            name,
            formatting.count(usage["model_calls"]),
            formatting.count(usage["input_tokens"]),
            formatting.count(usage["cached_input_tokens"]),
            formatting.rate(cache_hit_rate(usage["input_tokens"], usage["cached_input_tokens"])),
            formatting.count(usage["output_tokens"]),
            formatting.usd(usage["cost_usd"]),
            formatting.percent(usage["cost_usd"], total_cost),
        ]
        for name, usage in ordered
    ]
    columns = [name_header, "Model calls", "Input tokens", "Cached", "Cache hit", "Output tokens", "USD", "Share"]
    return Table(columns, rows, [False] + [True] * 7)


def cap_uses(record: Mapping[str, Any]) -> list[CapUse]:
    """Every cap that was set, with the run's usage of it."""
    total = dict(record["usage"]["total"], duration_seconds=record["duration_seconds"])
    uses = []
    for cap, limit in (record.get("caps") or {}).items():
        if limit is None:
            continue
        label, key = _CAP_USAGE.get(cap, (formatting.humanize(cap), None))
        used = total.get(key) if key else None
        uses.append(CapUse(cap, label, _amount(cap, limit), _amount(cap, used), *_fraction(used, limit)))
    return uses


def costed_steps(record: Mapping[str, Any]) -> list[tuple[str, float]]:
    """(step id, USD) of the steps that cost anything, in run order."""
    by_step = record["usage"]["by_step"]
    return [
        (step["id"], by_step[step["id"]]["cost_usd"])
        for step in record["steps"]
        if by_step.get(step["id"], {}).get("cost_usd")
    ]


def cost_chart_png(record: Mapping[str, Any]) -> bytes | None:
    """A bar chart of cost by step, or None when fewer than two steps cost anything."""
    steps = costed_steps(record)
    if len(steps) < 2:
        return None
    labels, values = zip(*steps, strict=True)
    return charts.bar_chart(labels, values, title=COST_CHART_CAPTION, value_label="USD", value_format="${:,.4f}")


def _amount(cap: str, value: float | None) -> str:
    if value is None:
        return "—"
    if cap == "max_cost_usd":
        return formatting.usd(value)
    if cap == "max_wall_seconds":
        return formatting.seconds(value)
    return formatting.count(value)


def _fraction(used: float | None, limit: float) -> tuple[float | None, str]:
    if used is None:
        return None, "ok"
    if limit == 0:
        return (1.0, "reached") if used else (0.0, "ok")
    fraction = used / limit
    state = "reached" if fraction >= 1 else "near" if fraction >= NEAR_LIMIT else "ok"
    return fraction, state
