"""Writing a run's report directory: artifacts, report.md, report.html and report.json.

Layout of ``reports/<task>/<run-id>/``::

    report.md            Markdown; images linked from artifacts/
    report.html          self-contained page (inline CSS, data: URI images)
    report.json          the record (runner.report/v1) with usage rollups and report-relative artifacts
    report.pdf           report.html printed by headless Chromium (format "pdf")
    report.xlsx          the report's tables, one worksheet each (format "xlsx")
    artifacts/<path>     copies of the workspace artifacts that passed the safety checks
    cost_by_step.png     drawn when two or more steps cost anything

Every file is written atomically; report.json is written last, so its presence means the
report is complete. Formats are independent: one that cannot be written (a missing package, a
failure of its renderer) is a warning in report.json, never a lost report.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from runner.core.report_formats import DEFAULT_FORMATS, FILE_NAMES, NAMES
from runner.files import write_atomic, write_text_atomic
from runner.redact import redact_secrets
from runner.reports import costs
from runner.reports.artifacts import CopiedArtifact, copy_artifacts, media_type_of
from runner.reports.record import fill_usage_rollups, finite_json, validate_record
from runner.tools.paths import WorkspacePathError, reportable_path

FORMATS = NAMES
PRINT_FILE = ".report-print.html"  # report.html for the PDF when html itself is not a format
COST_CHART_FILE = "cost_by_step.png"
_PATH_COMPONENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def report_dir(reports_root: Path, task: str, run_id: str) -> Path:
    """``reports_root/<task>/<run_id>``, refusing names that are not single safe components."""
    for name in (task, run_id):
        if not _PATH_COMPONENT.match(name):
            raise ValueError(f"{name!r} cannot name a report directory (letters, digits, '.', '_', '-' only)")
    return reports_root / task / run_id


def write_report(
    record: Mapping[str, Any],
    out_dir: Path,
    workspace: Path | None,
    formats: Iterable[str] = DEFAULT_FORMATS,
    *,
    secrets: Sequence[str] = (),
    transcript: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Path]:
    """Write the report of ``record`` into ``out_dir`` and return ``{format: path}``.

    Artifacts are copied from ``workspace`` (see :func:`runner.reports.artifacts.read_artifact`
    for the checks); refused ones are listed in the report and in report.json's
    ``artifact_problems``, and never stop the report; so are artifact paths a report cannot
    name. ``secrets`` are redacted from text artifacts, and binary artifacts holding one
    are withheld (see :mod:`runner.reports.screen`). NaN and infinities become null.
    ``transcript`` (the run's stored transcript entries) goes in report.html only, collapsed,
    redacted with ``secrets`` again; report.json keeps its size.
    Raises :class:`ValueError` when the record is invalid or a format is unknown.
    """
    formats = list(dict.fromkeys(formats))
    unknown = [name for name in formats if name not in FORMATS]
    if unknown:
        raise ValueError(f"unknown report format(s) {unknown}; choose from {list(FORMATS)}")
    record = _reportable_artifacts(fill_usage_rollups(finite_json(record)))
    validate_record(record)  # once, before anything is written
    out_dir.mkdir(parents=True, exist_ok=True)
    copied, problems = copy_artifacts(record.get("artifacts") or [], workspace, out_dir, secrets)
    shown = _as_shown(record, copied, problems)
    images = {a.source_path: a.content for a in copied if a.media_type.startswith("image/")}
    artifacts_rel = {a.source_path: a.report_path for a in copied}
    cost_chart = costs.cost_chart_png(record)
    if cost_chart is not None:
        write_atomic(out_dir / COST_CHART_FILE, cost_chart)
        images[costs.COST_CHART_KEY] = cost_chart
        artifacts_rel[costs.COST_CHART_KEY] = COST_CHART_FILE
    written: dict[str, Path] = {}
    warnings: list[str] = []
    if "markdown" in formats:
        with _unwritten("markdown", warnings):
            from runner.reports.markdown import render_markdown  # each renderer loads when its format is written

            written["markdown"] = write_text_atomic(out_dir / FILE_NAMES["markdown"], render_markdown(shown, artifacts_rel))
    if "html" in formats or "pdf" in formats:
        with _unwritten("html", warnings):
            from runner.reports.html import render_html  # Jinja2 and the page's view

            page = render_html(shown, images, redact_secrets(list(transcript), secrets))
            html = write_text_atomic(out_dir / (FILE_NAMES["html"] if "html" in formats else PRINT_FILE), page)
            if "html" in formats:
                written["html"] = html
    warnings += _extra_formats(record, formats, out_dir, written)
    not_written = [*warnings, *(record.get("warnings") or [])]
    if "json" in formats:
        record = {**record, "warnings": not_written} if not_written else record
        written["json"] = write_text_atomic(out_dir / FILE_NAMES["json"], report_json(record, copied, problems))
    return written


@contextlib.contextmanager
def _unwritten(format_name: str, warnings: list[str]) -> Iterator[None]:
    """Turn a failure to write one format into a warning: every format is independent, and
    report.json (written last) records what is missing instead of being lost with it. A failure
    to write is data-dependent (a cell, a character, a full disk), so any exception counts."""
    try:
        yield
    except Exception as error:  # one format must never cost the others
        warnings.append(f"{FILE_NAMES[format_name]} was not written: {type(error).__name__}: {str(error)[:300]}")


def _extra_formats(record: Mapping[str, Any], formats: list[str], out_dir: Path, written: dict[str, Path]) -> list[str]:
    """Write report.pdf and report.xlsx; what could not be written is returned as warnings
    (a missing browser or package does not lose the rest of the report)."""
    warnings: list[str] = []
    if "pdf" in formats:
        html = written.get("html") or out_dir / PRINT_FILE
        with _unwritten("pdf", warnings):
            from runner.reports.pdf import PdfUnavailable, print_pdf

            try:
                written["pdf"] = print_pdf(html, out_dir / FILE_NAMES["pdf"])
            except PdfUnavailable as error:
                warnings.append(f"report.pdf was not written: {error}")
        if "html" not in written:
            html.unlink(missing_ok=True)
    if "xlsx" in formats:
        with _unwritten("xlsx", warnings):
            try:
                from runner.reports.excel import workbook_bytes

                written["xlsx"] = write_atomic(out_dir / FILE_NAMES["xlsx"], workbook_bytes(record))
            except ModuleNotFoundError as error:
                warnings.append(f"report.xlsx was not written: it needs the package '{error.name}' (pip install 'runner[reports]')")
    return warnings


def report_json(record: Mapping[str, Any], copied: list[CopiedArtifact], problems: list[dict[str, str]]) -> str:
    """report.json: the record with artifact paths relative to the report directory.

    ``record`` was validated by :func:`write_report` before anything was written; the parts
    added here (the copied artifacts' entries, the refused ones) are built by this module in
    the schema's shape, so the record is not validated a second time."""
    document = {**record, "artifacts": [artifact.as_record() for artifact in copied]}
    all_problems = [*(record.get("artifact_problems") or []), *problems]
    if all_problems:
        document["artifact_problems"] = all_problems
    return json.dumps(document, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def _reportable_artifacts(record: dict[str, Any]) -> dict[str, Any]:
    """``record`` with artifact paths a report cannot name moved to ``artifact_problems``
    (a record stored by an older version, or built by hand), and every media type valid."""
    problems = list(record.get("artifact_problems") or [])
    artifacts = []
    for entry in record.get("artifacts") or []:
        path = _reportable(entry.get("path"), problems)
        if path is not None:
            artifacts.append({**entry, "path": path, "media_type": media_type_of(path)})
    steps = [
        {**step, "artifacts": [q for p in step["artifacts"] if (q := _reportable(p, []))]}
        if step.get("artifacts")
        else step
        for step in record.get("steps") or []
    ]
    fixed = {**record, "artifacts": artifacts, "steps": steps}
    if problems:
        fixed["artifact_problems"] = problems
    return fixed


def _reportable(path: Any, problems: list[dict[str, str]]) -> str | None:
    try:
        return reportable_path(path) if isinstance(path, str) else reportable_path("")
    except WorkspacePathError as refused:
        problems.append({"path": repr(path)[:300], "reason": f"cannot be reported: {refused}"})
        return None


def _as_shown(
    record: Mapping[str, Any], copied: list[CopiedArtifact], problems: list[dict[str, str]]
) -> dict[str, Any]:
    """The record as the renderers see it: only copied artifacts, under their workspace paths."""
    by_path = {artifact.source_path: artifact for artifact in copied}
    artifacts = [
        {**entry, "media_type": by_path.pop(entry["path"]).media_type}
        for entry in record.get("artifacts") or []
        if entry["path"] in by_path
    ]
    all_problems = [*(record.get("artifact_problems") or []), *problems]
    return {**record, "artifacts": artifacts, "artifact_problems": all_problems}
