"""Run reports: the run record (result data), then renderers for Markdown, HTML and JSON.

``write_report(record, out_dir, workspace)`` writes ``reports/<task>/<run-id>/``;
``validate_record`` checks a record against ``report.schema.json`` (``runner.report/v1``).
Names are imported from their modules on first use, so a run that writes no report (a
batch row) does not load the renderers.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from runner.reports.html import render_html
    from runner.reports.markdown import render_markdown
    from runner.reports.record import SCHEMA_VERSION, fill_usage_rollups, validate_record
    from runner.reports.writer import report_dir, write_report

_EXPORTS = {
    "SCHEMA_VERSION": "runner.reports.record",
    "fill_usage_rollups": "runner.reports.record",
    "render_html": "runner.reports.html",
    "render_markdown": "runner.reports.markdown",
    "report_dir": "runner.reports.writer",
    "validate_record": "runner.reports.record",
    "write_report": "runner.reports.writer",
}

__all__ = [
    "SCHEMA_VERSION",
    "fill_usage_rollups",
    "render_html",
    "render_markdown",
    "report_dir",
    "validate_record",
    "write_report",
]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
