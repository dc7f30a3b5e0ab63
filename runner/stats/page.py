"""``runner stats --html FILE``: one self-contained page (inline CSS, charts as ``data:`` PNGs,
no scripts), with a row of small trend charts per task."""

from __future__ import annotations

import base64
import io
from functools import cache
from typing import Any

from jinja2 import Environment

from runner.reports.formatting import count, rate, seconds, usd
from runner.reports.templating import html_environment
from runner.stats.compute import Stats, TrendPoint

TREND_CHARTS = (("cost_per_run", "$ per run"), ("success_rate", "success rate"), ("duration_p95", "p95 seconds"),
                ("tokens_per_run", "tokens per run"))


def render_page(stats: Stats) -> str:
    charts = {task: [(label, _data_uri(sparkline(points, metric, label))) for metric, label in TREND_CHARTS]
              for task, points in stats.trends.items()}
    since, until = stats.window.iso()
    return _environment().get_template("stats.html.j2").render(
        s=stats, data=stats.as_dict(), charts=charts, since=since, until=until,
    )


def sparkline(points: list[TrendPoint], metric: str, title: str) -> bytes:
    """A small line chart of one trend metric (gaps where a bucket has no value), as PNG bytes."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(3.3, 1.5), dpi=100, layout="constrained")
    axes = figure.subplots()
    values = [getattr(p, metric) for p in points]
    xs = list(range(len(points)))
    axes.plot(xs, [float("nan") if v is None else v for v in values], color="#2563eb", linewidth=1.5, marker="o", markersize=2.5)
    axes.set_title(title, loc="left", fontsize=8, color="#111827")
    axes.set_xticks([xs[0], xs[-1]] if len(xs) > 1 else xs, labels=_tick_labels(points))
    axes.tick_params(labelsize=6, colors="#6b7280")
    axes.spines[["top", "right"]].set_visible(False)
    axes.grid(axis="y", color="#e5e7eb")
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", metadata={"Software": None})
    return buffer.getvalue()


def _tick_labels(points: list[TrendPoint]) -> list[str]:
    ends = [points[0], points[-1]] if len(points) > 1 else points[:1]
    return [p.start[:16].replace("T00:00", "") for p in ends]


def _data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


@cache
def _environment() -> Environment:
    # numbers as every report writes them (runner.reports.formatting)
    return html_environment("runner.stats", pct=rate, usd=usd, secs=seconds, num=count, ratio=_ratio)


def _ratio(value: Any) -> str:
    return "" if value is None else f"×{value:.2f}"
