"""write_report: the report directory, report.json, artifacts."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from runner.reports.writer import report_dir, write_report

SCHEMA = Path(__file__).parents[2] / "runner" / "reports" / "report.schema.json"


@pytest.fixture
def out(tmp_path: Path) -> Path:
    return tmp_path / "reports" / "daily_sales" / "20261130T060000Z-7f3a2c"


def test_writes_all_three_files_and_artifacts(record: dict[str, Any], workspace: Path, out: Path) -> None:
    written = write_report(record, out, workspace)
    assert written == {"markdown": out / "report.md", "html": out / "report.html", "json": out / "report.json"}
    assert all(path.stat().st_size > 1_000 for path in written.values())
    assert (out / "artifacts" / "charts" / "revenue.png").read_bytes() == (
        workspace / "charts" / "revenue.png"
    ).read_bytes()
    assert (out / "cost_by_step.png").read_bytes().startswith(b"\x89PNG")
    assert not list(out.rglob("*.tmp"))
    assert "](artifacts/charts/revenue.png)" in written["markdown"].read_text()
    assert written["html"].read_text().count('src="data:image/png;base64,') == 2


def test_report_json_validates_against_the_schema(record: dict[str, Any], workspace: Path, out: Path) -> None:
    document = json.loads(write_report(record, out, workspace)["json"].read_text())
    schema = json.loads(SCHEMA.read_text())
    assert sorted(e.message for e in Draft202012Validator(schema).iter_errors(document)) == []
    assert document["schema_version"] == "runner.report/v1"
    assert document["usage"]["total"]["model_calls"] == 7
    assert document["usage"]["by_agent"]["writer"]["cost_usd"] == pytest.approx(0.0288)
    chart = document["artifacts"][0]
    assert chart["path"] == "artifacts/charts/revenue.png" and chart["source_path"] == "charts/revenue.png"
    assert chart["sha256"] == hashlib.sha256((out / chart["path"]).read_bytes()).hexdigest()
    assert "artifact_problems" not in document
    assert document["final_output"] == record["final_output"]


def test_refused_artifacts_are_reported_not_fatal(record: dict[str, Any], workspace: Path, out: Path) -> None:
    (workspace / "charts" / "passwd.png").symlink_to("/etc/passwd")
    record["artifacts"].append({"path": "charts/passwd.png", "media_type": "image/png", "step": "chart_revenue"})
    written = write_report(record, out, workspace)
    document = json.loads(written["json"].read_text())
    assert document["artifact_problems"] == [{"path": "charts/passwd.png", "reason": "is a symbolic link"}]
    assert [a["source_path"] for a in document["artifacts"]] == ["charts/revenue.png", "data/summary.csv"]
    assert "charts/passwd.png: is a symbolic link" in written["html"].read_text()
    assert "- charts/passwd.png: is a symbolic link" in written["markdown"].read_text()
    assert not (out / "artifacts" / "charts" / "passwd.png").exists()
    assert "root:" not in written["html"].read_text()


def test_formats_subset_and_no_workspace(record: dict[str, Any], out: Path) -> None:
    written = write_report(record, out, None, formats=("json",))
    assert list(written) == ["json"]
    assert not (out / "report.md").exists() and not (out / "artifacts").exists()
    problems = json.loads(written["json"].read_text())["artifact_problems"]
    assert {p["reason"] for p in problems} == {"cannot be copied: the run has no workspace"}


def test_invalid_record_or_format_writes_nothing(record: dict[str, Any], workspace: Path, out: Path) -> None:
    with pytest.raises(ValueError, match="unknown report format"):
        write_report(record, out, workspace, formats=("docx",))
    record["status"] = "exploded"
    with pytest.raises(ValueError, match="/status: 'exploded' is not one of"):
        write_report(record, out, workspace)
    assert not out.exists()


def test_nan_in_tool_data_becomes_null(record: dict[str, Any], out: Path) -> None:
    record["tables"]["query_sales"]["rows"][0][3] = float("nan")
    record["steps"][1]["data"]["rows"][1][2] = float("inf")
    document = json.loads(write_report(record, out, None)["json"].read_text())
    assert document["tables"]["query_sales"]["rows"][0][3] is None
    assert document["steps"][1]["data"]["rows"][1][2] is None
    assert "| North | 412 | 52,310.50 |  |" in (out / "report.md").read_text()


def test_rewriting_replaces_files(record: dict[str, Any], workspace: Path, out: Path) -> None:
    write_report(record, out, workspace)
    record["title"] = "Second version"
    write_report(record, out, workspace)
    assert (out / "report.md").read_text().startswith("# Second version")


def test_report_dir_refuses_unsafe_names(tmp_path: Path) -> None:
    assert report_dir(tmp_path, "daily_sales", "r-1") == tmp_path / "daily_sales" / "r-1"
    for task, run_id in [("..", "r"), ("t", "a/b"), ("t", ".hidden"), ("", "r")]:
        with pytest.raises(ValueError, match="cannot name a report directory"):
            report_dir(tmp_path, task, run_id)
