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
) -> ToolResult:
    """Draw a line, bar, pie or scatter chart from a table and save it as a PNG.

    Args:
        table: The table to plot.
        kind: Chart type: line, bar, pie or scatter.
        x: Column for the x axis (for a pie chart: the slice labels).
        y: Column(s) for the y axis (for a pie chart: exactly one column of sizes).
        title: Chart title.
        filename: File name under charts/ (default: "<table>_<kind>.png").
    """
    ys = [y] if isinstance(y, str) else list(y)
    if not ys:
        raise ToolFailure("give at least one y column")
    frame = table_store.load_table(ctx.workspace, table)
    table_store.require_columns(frame, [x, *ys], table)
    if len(frame) > MAX_POINTS:
        raise ToolFailure(f"table '{table}' has {len(frame)} rows; query it down to {MAX_POINTS} first")
    path = f"charts/{_png_name(filename or f'{table}_{kind}')}"
    write_workspace_file(ctx.workspace, path, _render(frame, kind, x, ys, title))
    return ToolResult(
        content=f"saved {kind} chart of {', '.join(ys)} by {x} to {path}",
        artifacts=[path],
        data={"path": path, "kind": kind, "x": x, "y": ys, "rows": len(frame)},
    )


def _render(frame: pd.DataFrame, kind: ChartKind, x: str, y: list[str], title: str) -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(8, 5), dpi=100)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    try:
        _draw(axes, frame, kind, x, y)
    except (TypeError, ValueError) as error:
        raise ToolFailure(f"cannot draw a {kind} chart of {', '.join(y)} by {x}: {error}") from None
    if title:
        axes.set_title(title)
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()


def _draw(axes: Axes, frame: pd.DataFrame, kind: ChartKind, x: str, y: list[str]) -> None:
    if kind == "pie":
        if len(y) != 1:
            raise ValueError("a pie chart takes exactly one y column")
        if len(frame) > MAX_PIE_SLICES:
            raise ValueError(f"{len(frame)} slices; a pie chart takes at most {MAX_PIE_SLICES}")
        axes.pie(frame[y[0]], labels=frame[x].astype(str).tolist(), autopct="%1.1f%%")
        axes.axis("equal")
        return
    labels = frame[x].astype(str) if kind == "bar" else frame[x]
    width = 0.8 / len(y)
    for index, column in enumerate(y):
        if kind == "line":
            axes.plot(labels, frame[column], label=column, marker="o" if len(frame) <= 50 else None)
        elif kind == "scatter":
            axes.scatter(labels, frame[column], label=column)
        else:
            positions = [i + (index - (len(y) - 1) / 2) * width for i in range(len(frame))]
            axes.bar(positions, frame[column], width=width, label=column)
    if kind == "bar":
        axes.set_xticks(range(len(frame)), labels, rotation=45 if len(frame) > 8 else 0)
    axes.set_xlabel(x)
    if len(y) > 1:
        axes.legend()
    else:
        axes.set_ylabel(y[0])


def _png_name(name: str) -> str:
    stem = re.sub(r"[^A-Za-z0-9_.-]", "_", name.rsplit("/", 1)[-1]).removesuffix(".png")
    return f"{stem.lstrip('.') or 'chart'}.png"
