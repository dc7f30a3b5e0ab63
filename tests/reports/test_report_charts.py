"""PNG charts and the report's cost-by-step chart."""

from __future__ import annotations

from typing import Any

import pytest

from runner.reports import charts, costs
from runner.reports.record import fill_usage_rollups

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def test_bar_and_line_charts_are_deterministic_pngs() -> None:
    bar = charts.bar_chart(["a", "b"], [1.0, 2.5], title="Bars", value_label="USD")
    line = charts.line_chart(["mon", "tue", "wed"], {"web": [1, 2, 3], "store": [2, 2, 1]}, title="Lines")
    assert bar.startswith(PNG_SIGNATURE) and len(bar) > 2_000
    assert line.startswith(PNG_SIGNATURE) and len(line) > 2_000
    assert charts.bar_chart(["a", "b"], [1.0, 2.5], title="Bars", value_label="USD") == bar


def test_mismatched_lengths_are_errors() -> None:
    with pytest.raises(ValueError, match="2 labels for 1 values"):
        charts.bar_chart(["a", "b"], [1.0])
    with pytest.raises(ValueError, match="series 'web' has 1 values for 2 x values"):
        charts.line_chart([1, 2], {"web": [1.0]})


def test_cost_chart_needs_two_costed_steps(record: dict[str, Any]) -> None:
    assert costs.cost_chart_png(fill_usage_rollups(record)).startswith(PNG_SIGNATURE)  # type: ignore[union-attr]
    for step in record["steps"][1:]:
        step["usage"]["cost_usd"] = 0.0
    assert costs.cost_chart_png(fill_usage_rollups(record)) is None


def test_cap_uses_compare_limits_with_usage(record: dict[str, Any]) -> None:
    record["caps"]["max_cost_usd"] = 0.03
    uses = {use.cap: use for use in costs.cap_uses(fill_usage_rollups(record))}
    assert "max_input_tokens" not in uses  # null: not set
    assert (uses["max_cost_usd"].state, uses["max_cost_usd"].percent) == ("reached", "115%")
    assert (uses["max_steps"].used, uses["max_steps"].state) == ("7", "ok")
    assert uses["max_wall_seconds"].used == "40.2 s"
