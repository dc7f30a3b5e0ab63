"""Small PNG charts (matplotlib, Agg) for reports and for tools that draw charts.

matplotlib is imported only when a chart is drawn, and ``pyplot`` is never used: each chart
is its own ``Figure`` with no global state, so charts can be drawn from several threads.
Output is deterministic (no timestamps or software version in the PNG metadata).
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

PALETTE = ("#2563eb", "#f59e0b", "#10b981", "#ef4444", "#8b5cf6", "#0ea5e9", "#64748b")
DPI = 110


def bar_chart(
    labels: Sequence[str],
    values: Sequence[float],
    *,
    title: str = "",
    value_label: str = "",
    horizontal: bool = True,
    value_format: str = "{:,.2f}",
) -> bytes:
    """A bar chart as PNG bytes; horizontal bars (the default) keep long labels readable."""
    if len(labels) != len(values):
        raise ValueError(f"bar_chart: {len(labels)} labels for {len(values)} values")
    height = max(2.2, 0.42 * len(labels) + 1.2) if horizontal else 3.6
    figure, axes = _figure(width=7.5, height=height, title=title)
    positions = range(len(labels))
    if horizontal:
        bars = axes.barh(positions, values, color=PALETTE[0])
        axes.set_yticks(list(positions), labels=list(labels))
        axes.invert_yaxis()
        axes.set_xlabel(value_label)
        axes.grid(axis="x", color="#e5e7eb")
        axes.margins(x=0.15)
    else:
        bars = axes.bar(positions, values, color=PALETTE[0])
        axes.set_xticks(list(positions), labels=list(labels), rotation=30, ha="right")
        axes.set_ylabel(value_label)
        axes.grid(axis="y", color="#e5e7eb")
        axes.margins(y=0.15)
    axes.bar_label(bars, labels=[value_format.format(v) for v in values], padding=3, fontsize=8, color="#374151")
    return _png(figure)


def line_chart(
    x: Sequence[Any],
    series: Mapping[str, Sequence[float]],
    *,
    title: str = "",
    x_label: str = "",
    y_label: str = "",
) -> bytes:
    """A line chart of named series over shared ``x`` values (numbers, strings or dates), as PNG bytes."""
    for name, ys in series.items():
        if len(ys) != len(x):
            raise ValueError(f"line_chart: series {name!r} has {len(ys)} values for {len(x)} x values")
    figure, axes = _figure(width=7.5, height=3.6, title=title)
    for index, (name, ys) in enumerate(series.items()):
        axes.plot(list(x), list(ys), label=name, color=PALETTE[index % len(PALETTE)], linewidth=1.6)
    axes.set_xlabel(x_label)
    axes.set_ylabel(y_label)
    axes.grid(color="#e5e7eb")
    if len(series) > 1:
        axes.legend(frameon=False, fontsize=8)
    figure.autofmt_xdate()
    return _png(figure)


def _figure(width: float, height: float, title: str) -> tuple[Figure, Axes]:
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    axes = figure.subplots()
    axes.set_title(title, loc="left", fontsize=11, fontweight="bold", color="#111827")
    axes.spines[["top", "right"]].set_visible(False)
    axes.set_axisbelow(True)
    axes.tick_params(labelsize=8, colors="#374151")
    return figure, axes


def _png(figure: Figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", metadata={"Software": None})
    return buffer.getvalue()
