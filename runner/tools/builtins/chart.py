"""Built-in ``chart``: draw a table's columns as a PNG under ``charts/`` in the workspace.

Uses matplotlib's object API with the Agg canvas (no pyplot, no global figure state), so
charts can be drawn from worker threads.
"""

from __future__ import annotations

import io
import re
from typing import TYPE_CHECKING, Literal

from runner.errors import ToolFailure
from runner.tools import table_store
from runner.tools.base import ToolContext, ToolResult, tool
from runner.tools.paths import write_workspace_file

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes

MAX_POINTS = 100_000
MAX_PIE_SLICES = 50
_ISO_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?)?$")
ChartKind = Literal["line", "bar", "pie", "scatter"]


@tool
def chart(
    ctx: ToolContext,
    table: str,
    kind: ChartKind,
    x: str,
    y: str | tuple[str, ...],
    title: str = "",
    filename: str | None = None,
    x_label: str | None = None,
    y_label: str | None = None,
) -> ToolResult:
    """Draw a line, bar, pie or scatter chart from a table and save it as a PNG.

    Dates on the x axis (ISO text like 2026-11-30, or timestamps) are drawn on a date axis.

    Args:
        table: The table to plot.
        kind: Chart type: line, bar, pie or scatter.
        x: Column for the x axis (for a pie chart: the slice labels).
        y: Column(s) for the y axis (for a pie chart: exactly one column of sizes).
        title: Chart title.
        filename: File name under charts/ (default: "<table>_<kind>.png").
        x_label: Axis label for x (default: the column name in words).
        y_label: Axis label for y (default: the column name in words).
    """
    ys = [y] if isinstance(y, str) else list(y)
    if not ys:
        raise ToolFailure("give at least one y column")
    frame = table_store.load_table(ctx.workspace, table)
    table_store.require_columns(frame, [x, *ys], table)
    if len(frame) > MAX_POINTS:
        raise ToolFailure(f"table '{table}' has {len(frame)} rows; query it down to {MAX_POINTS} first")
    path = f"charts/{_png_name(filename or f'{table}_{kind}')}"
    labels = (x_label if x_label is not None else _words(x), y_label if y_label is not None else (_words(ys[0]) if len(ys) == 1 else ""))
    write_workspace_file(ctx.workspace, path, _render(frame, kind, x, ys, title, labels), quota_bytes=ctx.disk_quota_bytes)
    return ToolResult(
        content=f"saved {kind} chart of {', '.join(ys)} by {x} to {path}",
        artifacts=[path],
        data={"path": path, "kind": kind, "x": x, "y": ys, "rows": len(frame)},
    )


def _render(frame: pd.DataFrame, kind: ChartKind, x: str, y: list[str], title: str, labels: tuple[str, str]) -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(8, 4.5), dpi=100)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    try:
        _draw(axes, frame, kind, x, y, labels)
    except (TypeError, ValueError) as error:
        raise ToolFailure(f"cannot draw a {kind} chart of {', '.join(y)} by {x}: {error}") from None
    if title:
        axes.set_title(title, loc="left", fontweight="bold")
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", metadata={"Software": None})
    return buffer.getvalue()


def _draw(axes: Axes, frame: pd.DataFrame, kind: ChartKind, x: str, y: list[str], labels: tuple[str, str]) -> None:
    from matplotlib.ticker import FuncFormatter

    if kind == "pie":
        if len(y) != 1:
            raise ValueError("a pie chart takes exactly one y column")
        if len(frame) > MAX_PIE_SLICES:
            raise ValueError(f"{len(frame)} slices; a pie chart takes at most {MAX_PIE_SLICES}")
        axes.pie(frame[y[0]], labels=frame[x].astype(str).tolist(), autopct="%1.1f%%")
        axes.axis("equal")
        return
    dates = _as_dates(frame[x]) if kind in ("line", "scatter") else None
    xs = frame[x].astype(str) if kind == "bar" else (dates if dates is not None else frame[x])
    width = 0.8 / len(y)
    for index, column in enumerate(y):
        if kind == "line":
            axes.plot(xs, frame[column], label=column, marker="o" if len(frame) <= 50 else None, markersize=3, linewidth=1.6)
        elif kind == "scatter":
            axes.scatter(xs, frame[column], label=column)
        else:
            positions = [i + (index - (len(y) - 1) / 2) * width for i in range(len(frame))]
            axes.bar(positions, frame[column], width=width, label=column)
    if kind == "bar":
        axes.set_xticks(range(len(frame)), xs, rotation=45 if len(frame) > 8 else 0, ha="right" if len(frame) > 8 else "center")
    if dates is not None:
        _date_axis(axes, dates)
    axes.yaxis.set_major_formatter(FuncFormatter(_thousands))
    axes.spines[["top", "right"]].set_visible(False)
    axes.grid(axis="y", color="#e5e7eb")
    axes.set_axisbelow(True)
    axes.set_xlabel(labels[0])
    axes.set_ylabel(labels[1])
    if len(y) > 1:
        axes.legend(frameon=False)


def _as_dates(values: pd.Series) -> pd.Series | None:
    """``values`` as timestamps when they are dates (timestamps, or ISO text such as
    2026-11-30 in every non-empty cell), else ``None``."""
    import pandas as pd

    if pd.api.types.is_datetime64_any_dtype(values):
        return values
    present = values.dropna()
    if present.empty or not all(isinstance(v, str) and _ISO_DATE.match(v) for v in present):
        return None
    parsed = pd.to_datetime(values, errors="coerce", format="ISO8601")
    return parsed if parsed.notna().sum() == len(present) else None


def _date_axis(axes: Axes, dates: pd.Series) -> None:
    """A few ticks a reader takes in at a glance, each a whole date ("8 Nov", or "Nov 2026"
    over long spans), none outside the data."""
    from matplotlib.dates import AutoDateLocator, DateFormatter

    present = dates.dropna()
    span_days = (present.max() - present.min()).days if len(present) else 0
    axes.xaxis.set_major_locator(AutoDateLocator(minticks=4, maxticks=8))
    axes.xaxis.set_major_formatter(DateFormatter("%b %Y" if span_days > 400 else "%-d %b"))
    if span_days:
        pad = (present.max() - present.min()) * 0.02
        axes.set_xlim(present.min() - pad, present.max() + pad)


def _thousands(value: float, _position: int) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 or float(value).is_integer() else f"{value:,.2f}"


def _words(column: str) -> str:
    """``revenue_sum`` -> ``Revenue sum``: an axis label for a reader, not a column name."""
    text = column.replace("_", " ").strip()
    return text[:1].upper() + text[1:]


def _png_name(name: str) -> str:
    stem = re.sub(r"[^A-Za-z0-9_.-]", "_", name.rsplit("/", 1)[-1]).removesuffix(".png")
    return f"{stem.lstrip('.') or 'chart'}.png"
