"""``report.tables`` through the real CLI: every table it names is shown, or the report says why not."""

from __future__ import annotations

import json
from pathlib import Path

from runner.model.server import ScriptedServer
from tests.support.project import copy_shipped, run_cli


def test_a_load_table_step_is_shown_and_a_table_that_cannot_be_is_a_warning(tmp_path: Path) -> None:
    project = copy_shipped(tmp_path / "p", ("agents.d", "tasks.d", "examples/data"))
    task = project / "tasks.d" / "daily_report.yaml"
    task.write_text(task.read_text().replace("  tables: [day_totals,", "  tables: [load, trend_chart, day_totals,"))
    with ScriptedServer({"fallback": "Revenue was steady."}) as model:
        result = run_cli(project, model, "run", "daily_report", "--input", "date=2026-11-30")
    assert result.returncode == 0, result.stderr
    (report_dir,) = (project / "reports" / "daily_report").iterdir()
    record = json.loads((report_dir / "report.json").read_text())
    load = record["tables"]["load"]
    assert load["columns"][:3] == ["date", "order_id", "region"] and len(load["rows"]) == 5
    assert "The first 5 of" in load["caption"] and "table 'sales'" in load["caption"]
    assert "trend_chart" not in record["tables"]
    assert any("report.tables: step 'trend_chart' is not shown" in w for w in record["warnings"])
    markdown = (report_dir / "report.md").read_text()
    assert "The first 5 of" in markdown and "SO-1000001" in markdown
