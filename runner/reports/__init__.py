"""Run reports: the run record (result data), then renderers for Markdown, HTML and JSON.

``write_report(record, out_dir, workspace)`` writes ``reports/<task>/<run-id>/``;
``validate_record`` checks a record against ``report.schema.json`` (``runner.report/v1``).
"""

from runner.reports.html import render_html
from runner.reports.markdown import render_markdown
from runner.reports.record import SCHEMA_VERSION, fill_usage_rollups, validate_record
from runner.reports.writer import report_dir, write_report

__all__ = [
    "SCHEMA_VERSION",
    "fill_usage_rollups",
    "render_html",
    "render_markdown",
    "report_dir",
    "validate_record",
    "write_report",
]
