"""Through the real CLI: a table cell holding control characters (BEL, ESC) is written to
report.xlsx as a visible escape, and a format that cannot be written is a warning in report.json,
never a lost report."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

from runner.model.server import ScriptedServer
from tests.support.project import run_cli, write_project

TASK = """\
apiVersion: runner/v1
kind: Task
name: bells
workspace: {files: [data/names.csv]}
pipeline:
  steps:
    - id: load
      tool: load_table
      args: {path: names.csv, name: names}
    - id: totals
      description: "Totals\\u001b[31m by name"
      tool: query_table
      depends_on: [load]
      args: {table: names, group_by: [name], aggregations: {n: sum}, save_as: totals}
report:
  formats: [FORMATS]
  tables: [totals]
  columns: {name: {label: "Name\\u0007"}}
"""


def bell_project(root: Path, formats: str) -> Path:
    return write_project(root, {
        "tasks.d/bells.yaml": TASK.replace("FORMATS", formats),
        "data/names.csv": "name,n\nbell\x07ring,1\nesc\x1b[31mred,2\nnul\x00byte,3\n",
    })  # fmt: skip


def run_bells(root: Path) -> tuple[Any, Path]:
    with ScriptedServer({"fallback": "done"}) as server:
        result = run_cli(root, server, "run", "bells")
    assert "Traceback" not in result.stderr, result.stderr
    (report,) = (root / "reports" / "bells").iterdir()
    return result, report


def test_control_characters_reach_the_workbook_as_escapes(tmp_path: Path) -> None:
    from openpyxl import load_workbook

    result, report = run_bells(bell_project(tmp_path / "p", "json, xlsx, markdown"))
    assert result.returncode == 0, result.stderr
    record = json.loads((report / "report.json").read_text())
    assert not record.get("warnings"), record.get("warnings")
    book = load_workbook(io.BytesIO((report / "report.xlsx").read_bytes()))
    (sheet,) = [book[name] for name in book.sheetnames if name != "Report"]
    assert "\x1b" not in sheet.title
    rows = list(sheet.iter_rows(values_only=True))
    assert rows[0][0] == "Name\\x07"
    assert {row[0] for row in rows[1:]} == {"bell\\x07ring", "esc\\x1b[31mred", "nul\\x00byte"}
    assert ["bell\x07ring", 1] in record["tables"]["totals"]["rows"]  # the record keeps the data as it was


def test_a_format_that_fails_is_a_warning_and_report_json_is_kept(tmp_path: Path) -> None:
    root = bell_project(tmp_path / "p", "json, xlsx, markdown")
    (root / "openpyxl").mkdir()  # a broken package first on the path: the workbook cannot be built
    (root / "openpyxl" / "__init__.py").write_text("raise RuntimeError('openpyxl is broken here')\n")
    with ScriptedServer({"fallback": "done"}) as server:
        result = run_cli(root, server, "run", "bells", env={"PYTHONPATH": f"{root}:{Path(__file__).resolve().parents[2]}"})
    assert "Traceback" not in result.stderr, result.stderr
    (report,) = (root / "reports" / "bells").iterdir()
    record = json.loads((report / "report.json").read_text())
    assert any(w.startswith("report.xlsx was not written: RuntimeError: openpyxl is broken here") for w in record["warnings"])
    assert (report / "report.md").is_file() and not (report / "report.xlsx").exists()
