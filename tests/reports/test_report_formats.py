"""report.pdf (printed by the system's headless Chromium), report.xlsx, declared column
labels and formats, and charts whose date axis reads as dates."""

from __future__ import annotations

import io
import shutil
from pathlib import Path
from typing import Any

import pytest

from runner.config.schema import schema
from runner.core.report_formats import CHARTS, DEFAULT_FORMATS, NAMES
from runner.reports import formatting
from runner.reports.writer import write_report
from tests.support.services import requires

COLUMNS = {
    "region": {"label": "Region"},
    "orders": {"label": "Orders", "format": "integer"},
    "revenue": {"label": "Revenue", "format": "currency"},
    "vs_prev_week": {"label": "vs last week", "format": "percent"},
}
has_chromium = requires(any(shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome")), "no headless Chromium")


@pytest.mark.parametrize(
    ("value", "style", "text"),
    [
        (52310.5, {"format": "currency"}, "$52,310.50"),
        (-12.5, {"format": "currency", "currency": "EUR"}, "-€12.50"),
        (1234.5, {"format": "currency", "currency": "SEK", "decimals": 0}, "SEK 1,234"),
        (0.042, {"format": "percent"}, "4.2%"),
        (-0.125, {"format": "percent", "decimals": 0}, "-12%"),
        (412.0, {"format": "integer"}, "412"),
        (1234567.891, {"format": "number"}, "1,234,567.89"),
        ("2026-11-30T00:00:00.000", {"format": "date"}, "2026-11-30"),
        ("North", {"format": "currency"}, "North"),
        (None, {"format": "currency"}, ""),
        (True, {"format": "integer"}, "yes"),
    ],
)
def test_styled_cells(value: Any, style: dict[str, Any], text: str) -> None:
    assert formatting.styled(value, style) == text


def test_labels_and_formats_in_every_text_format(record: dict[str, Any], workspace: Path, tmp_path: Path) -> None:
    record["columns"] = COLUMNS
    written = write_report(record, tmp_path / "out", workspace, formats=("markdown", "html", "json"))
    html = written["html"].read_text()
    markdown = written["markdown"].read_text()
    for text in (html, markdown):
        assert "vs last week" in text and "$52,310.50" in text and "-12.5%" in text and "4.2%" in text
    assert ">revenue<" not in html and "| revenue |" not in markdown
    assert '"columns"' in written["json"].read_text()


def test_workbook_opens_with_the_right_values(record: dict[str, Any], workspace: Path, tmp_path: Path) -> None:
    from openpyxl import load_workbook

    record["columns"] = COLUMNS
    record["tables"]["top_categories"]["rows"].append(["=HYPERLINK(\"http://evil\")", 1, 2.0])
    written = write_report(record, tmp_path / "out", workspace, formats=("json", "xlsx"))
    book = load_workbook(io.BytesIO(written["xlsx"].read_bytes()))
    assert book.sheetnames == ["Report", "Query sales", "Top categories"]
    about = {row[0]: row[1] for row in book["Report"].iter_rows(values_only=True)}
    assert about["Status"] == "completed" and about["Run"] == record["run_id"]
    sales = book["Query sales"]
    rows = list(sales.iter_rows(values_only=True))
    assert rows[0] == ("Region", "Orders", "Revenue", "vs last week")
    assert rows[1:] == [tuple(r) for r in record["tables"]["query_sales"]["rows"]]  # numbers stay numbers
    assert sales["C2"].number_format == '"$"#,##0.00' and sales["D2"].number_format == "0.0%"
    assert sales["B2"].number_format == "#,##0" and sales.freeze_panes == "A2"
    categories = book["Top categories"]
    injected = categories.cell(row=categories.max_row, column=1)
    assert injected.data_type == "s" and injected.value.startswith("=HYPERLINK")  # text, not a formula


@has_chromium
@pytest.mark.browser
def test_pdf_renders_to_pages(record: dict[str, Any], workspace: Path, tmp_path: Path) -> None:
    from pypdf import PdfReader

    record["columns"] = COLUMNS
    written = write_report(record, tmp_path / "out", workspace, formats=("pdf", "json"))
    assert "html" not in written and not (tmp_path / "out" / ".report-print.html").exists()
    reader = PdfReader(written["pdf"])
    assert len(reader.pages) >= 2
    text = "\n".join(page.extract_text() for page in reader.pages)
    assert record["title"] in text and "$52,310.50" in text and "vs last week" in text
    images = sum(len(page.images) for page in reader.pages)
    assert images >= 1  # the chart is in the PDF, not a broken link


def test_missing_browser_is_a_warning_not_a_lost_report(
    record: dict[str, Any], workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    monkeypatch.setenv("RUNNER_CHROMIUM", str(tmp_path / "no-such-browser"))
    written = write_report(record, tmp_path / "out", workspace, formats=("html", "pdf", "json"))
    assert set(written) == {"html", "json"}
    warnings = json.loads(written["json"].read_text())["warnings"]
    assert any("report.pdf was not written" in w and "RUNNER_CHROMIUM" in w for w in warnings)


def test_chart_date_axis_reads_as_dates(tmp_path: Path) -> None:
    import asyncio

    import pandas as pd

    from runner.tools import table_store
    from runner.tools.base import ToolContext
    from runner.tools.builtins.chart import _as_dates
    from runner.tools.registry import default_registry

    days = [f"2026-11-{d:02d}" for d in range(3, 31)]
    assert _as_dates(pd.Series(days)) is not None
    assert _as_dates(pd.Series(["North", "South"])) is None
    assert _as_dates(pd.Series(["2026-11-03", "soon"])) is None
    table_store.save_table(tmp_path, "trend", pd.DataFrame({"date": days, "revenue_sum": range(28)}))
    ctx = ToolContext(workspace=tmp_path)
    asyncio.run(default_registry().invoke("chart", {"table": "trend", "kind": "line", "x": "date", "y": "revenue_sum"}, ctx))
    from matplotlib.figure import Figure

    from runner.tools.builtins import chart

    figure = Figure()
    axes = figure.add_subplot()
    chart._draw(axes, pd.DataFrame({"date": days, "revenue_sum": range(28)}), "line", "date", ["revenue_sum"], ("", "Revenue"))
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(figure).draw()
    labels = [t.get_text() for t in axes.get_xticklabels() if t.get_text()]
    assert 3 <= len(labels) <= 9  # a few ticks, not 28 overlapping strings
    assert all(label[0].isdigit() and label.split()[1] in ("Nov", "Dec") for label in labels), labels  # "8 Nov", not 2026-11-08
    assert axes.get_ylabel() == "Revenue"


def test_the_task_schema_offers_the_registered_formats() -> None:
    """The schema is JSON, so it cannot import the registry: it is held to it here."""
    task = schema("task")
    report = task["properties"]["report"]["properties"]["formats"]["items"]["enum"]
    copied = task["$defs"]["copy"]["properties"]["formats"]["items"]["enum"]
    assert report == list(NAMES) and copied == [*NAMES, CHARTS]
    assert set(DEFAULT_FORMATS) <= set(NAMES)
