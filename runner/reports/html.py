"""report.html: one self-contained page (inline CSS, charts as data: URIs, no scripts).

The page is the Jinja2 template ``templates/report.html.j2`` (package data) over the
:class:`~runner.reports.view.ReportView`; this module computes what the template needs and
nothing else. Autoescape is on and undefined names are errors, so every value from the
record is escaped; the only ``Markup`` handed to the template is the final output's
Markdown, rendered by :mod:`runner.reports.narrative` (which escapes it first). Charts are
``data:`` URIs built here from base64 text, which escaping leaves as it is, so the template
needs no ``|safe`` anywhere (``tests/reports/test_report_html.py`` keeps it so).

The page loads nothing: a Content-Security-Policy meta tag allows only inline styles and
``data:`` images, as a second line of defence behind escaping.

Why a template: the page is layout, and a template reads as the page it makes. Jinja costs
a run that writes report.html about 4.5 MiB of peak memory (the library, and compiling the
template) and about 0.1 s of CPU; memory is a bound, not a target, so the clearer form stays
while a ``runner run`` stays under 1.5x the floor (``docs/development.md`` has the figures).
Jinja's own in-memory cache compiles the template once per process; no compiled-template
cache is kept on disk (the one removed with the fragments saved memory no bound needs).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

from jinja2 import Environment

import runner
from runner.reports import costs, narrative
from runner.reports.record import SCHEMA_VERSION, fill_usage_rollups
from runner.reports.templating import html_environment
from runner.reports.transcript import message_text, turns
from runner.reports.view import Chart, ReportView, build_view

TEMPLATE = "report.html.j2"
TRANSCRIPT_PART_CHARS = 20_000
"""Characters of one message or tool output the page shows."""


def render_html(
    record: Mapping[str, Any], images: Mapping[str, bytes], transcript: Sequence[Mapping[str, Any]] = ()
) -> str:
    """The HTML report of ``record``, with ``transcript`` (stored entries, see
    :mod:`runner.reports.transcript`) as a collapsed section when there is one.

    ``images`` maps an image artifact's record path to its bytes; charts without an entry
    are shown as "not copied". The cost-by-step chart is drawn here unless ``images`` has
    it under ``COST_CHART_KEY``.
    """
    record = fill_usage_rollups(record)
    images = dict(images)
    if costs.COST_CHART_KEY not in images:
        chart = costs.cost_chart_png(record)
        if chart is not None:
            images[costs.COST_CHART_KEY] = chart
    view = build_view(record, with_cost_chart=costs.COST_CHART_KEY in images)
    return environment().get_template(TEMPLATE).render(
        v=view,
        narrative_html=narrative.to_html(view.narrative.text) if view.narrative.text else None,
        images=_data_uris(view, images),
        toc=_toc(view, bool(transcript)),
        transcript=turns(transcript),
        version=runner.__version__,
        schema_version=SCHEMA_VERSION,
    )


@cache
def environment() -> Environment:
    """The report's Jinja environment, one per process (Jinja keeps the compiled template)."""
    return html_environment("runner.reports", message_text=message_text, truncate_chars=_truncate_chars)


def _truncate_chars(text: str) -> str:
    """Keep the page a reasonable size: very long parts are cut (the store keeps them whole)."""
    if len(text) <= TRANSCRIPT_PART_CHARS:
        return text
    return f"{text[:TRANSCRIPT_PART_CHARS]}\n[cut at {TRANSCRIPT_PART_CHARS} of {len(text)} characters: runner runs show ID --transcript has it all]"


def _data_uris(view: ReportView, images: Mapping[str, bytes]) -> dict[str, str]:
    charts: list[Chart] = [*view.charts, *([view.cost_chart] if view.cost_chart else [])]
    return {
        chart.key: f"data:{chart.media_type};base64,{base64.b64encode(images[chart.key]).decode('ascii')}"
        for chart in charts
        if chart.key in images
    }


def _toc(view: ReportView, with_transcript: bool) -> list[tuple[str, str]]:
    sections = [
        ("summary", "Summary", True),
        ("sources", "Sources", view.sources is not None),
        ("tables", "Key tables", bool(view.tables)),
        ("charts", "Charts", bool(view.charts or view.files or view.artifact_problems)),
        ("changes", "Changes", view.changes is not None),
        ("plan", "Plan", bool(view.plans)),
        ("steps", "Steps", True),
        ("cost", "Cost", True),
        ("caps", "Caps", True),
        ("delivery", "Delivery", view.deliveries is not None),
        ("inputs", "Inputs", True),
        ("timings", "Timings", True),
        ("details", "Step details", True),
        ("transcript", "Transcript", with_transcript),
    ]
    return [(anchor, heading) for anchor, heading, shown in sections if shown]
