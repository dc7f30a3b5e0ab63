"""The report formats: one list, read by the writer, the task schema's checks, the CLI, the
deliveries and the run's summary line. A format is its name in YAML and on the command line,
the file it writes, whether a task writes it by default, and where a person looks first."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ReportFormat:
    name: str  # in ``report.formats``, ``--format`` and a delivery's ``formats``
    file: str  # the file it writes in the report folder
    default: bool  # written when a task names no formats
    opened_first: int  # the order in which ``runner run`` names the written files (what a person opens first)


REPORT_FORMATS = (
    ReportFormat("markdown", "report.md", default=True, opened_first=3),
    ReportFormat("html", "report.html", default=True, opened_first=0),
    ReportFormat("json", "report.json", default=True, opened_first=4),
    ReportFormat("pdf", "report.pdf", default=False, opened_first=1),  # printed by headless Chromium
    ReportFormat("xlsx", "report.xlsx", default=False, opened_first=2),  # the report's tables
)
NAMES = tuple(f.name for f in REPORT_FORMATS)
DEFAULT_FORMATS = tuple(f.name for f in REPORT_FORMATS if f.default)
FILE_NAMES = {f.name: f.file for f in REPORT_FORMATS}
DOCUMENTS = ("markdown", "html")
"""The formats a person reads (rewritten when the deliveries are known, to say where the report went)."""
CHARTS = "charts"
"""What a delivery may copy beyond the formats: the report's chart images."""


def by_opening_order(names: tuple[str, ...] | list[str]) -> list[ReportFormat]:
    """The formats among ``names`` in the order a person opens them."""
    return sorted((f for f in REPORT_FORMATS if f.name in names), key=lambda f: f.opened_first)
