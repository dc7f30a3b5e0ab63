"""report.md content."""

from __future__ import annotations

from typing import Any

from runner.reports.costs import COST_CHART_KEY
from runner.reports.markdown import fenced, render_markdown

RELATIVE = {
    "charts/revenue.png": "artifacts/charts/revenue.png",
    "data/summary.csv": "artifacts/data/summary.csv",
    COST_CHART_KEY: "cost_by_step.png",
}


def test_sections_in_order(record: dict[str, Any]) -> None:
    text = render_markdown(record, RELATIVE)
    headings = [line for line in text.splitlines() if line.startswith("## ")]
    assert headings == [
        "## Summary",
        "## Key tables",
        "## Charts",
        "## Changes since the previous run",
        "## Plan",
        "## Steps",
        "## Cost",
        "## Caps",
        "## Inputs",
        "## Configuration",
        "## Timings",
        "## Step details",
    ]
    assert text.startswith("# Daily sales report — 2026-11-29\n\n**Status: ✅ COMPLETED** · exit code 0")


def test_tables_and_figures(record: dict[str, Any]) -> None:
    text = render_markdown(record, RELATIVE)
    assert "| region | orders | revenue | vs_prev_week |\n|---|---:|---:|---:|" in text
    assert "| North | 412 | 52,310.50 | 0.042 |" in text
    assert "| Electronics | 903 | 71,200 |" in text
    assert "![chart_revenue: Chart daily revenue by region over 30 days](artifacts/charts/revenue.png)" in text
    assert "![Cost by step (USD)](cost_by_step.png)" in text
    assert "- [data/summary.csv](artifacts/data/summary.csv)" in text
    assert "| write_summary | synthesis | writer | completed | 14.1 s | 10,950 | 0 | $0.0288 |" in text
    assert "| gpt-4.1-mini | 6 | 9,300 | 2,048 | 22.0% | 1,090 | $0.005700 | 16.5% |" in text  # 2,048 / 9,300 cached
    assert "**Prompt cache:** 10.7% of 19,100 input tokens" in text
    assert "| Cost | $0.0500 | $0.0345 | 69% | ok |" in text
    assert "Config hash: `sha256:" in text


def test_narrative_is_demoted_and_untrusted_text_is_neutralised(record: dict[str, Any]) -> None:
    record["title"] = "Sales | <b>bold</b>"
    record["tables"]["query_sales"]["rows"][0][0] = "No|rth <img src=x>"
    text = render_markdown(record, RELATIVE)
    assert "### Daily sales: Sunday 29 November 2026" in text
    assert "# Sales | &lt;b>bold&lt;/b>" in text
    assert "| No\\|rth &lt;img src=x> |" in text
    assert "&lt;script>alert(1)&lt;/script>" in text
    assert "<script>" not in text


def test_missing_images_are_named_not_linked(record: dict[str, Any]) -> None:
    text = render_markdown(record, {})
    assert (
        "_Chart `charts/revenue.png` (chart_revenue: Chart daily revenue by region over 30 days) was not copied" in text
    )
    assert "cost_by_step.png" not in text


def test_structured_final_output_is_a_table(record: dict[str, Any]) -> None:
    record["final_output"] = {"revenue": 184220.5, "top_region": "North"}
    assert "| Field | Value |\n|---|---|\n| revenue | 184,220.50 |\n| top_region | North |" in render_markdown(
        record, {}
    )
    record["final_output"] = {"regions": {"North": 1}}
    assert '```json\n{\n  "regions": {\n    "North": 1\n  }\n}\n```' in render_markdown(record, {})


def test_fences_outgrow_backticks_inside() -> None:
    assert fenced("a ```` b") == "`````\na ```` b\n`````"
