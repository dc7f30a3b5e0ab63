"""A tool step's declared arguments through the real CLI: ``runner validate`` refuses a bad
value at its place; a value only a run knows (a template) fails its step with a short error
that names the argument, the value and the allowed values (no JSON Schema dump)."""

from __future__ import annotations

from pathlib import Path

from runner.model.server import ScriptedServer
from tests.support.project import copy_shipped, run_cli

GOOD_FILTER = 'filters: [{column: date, op: "==", value: "{{ inputs.date }}"}]\n        group_by: [date]'
ALLOWED = "'==', '!=', '<', '<=', '>', '>=', 'in', 'not_in' or 'contains'"


def project_with(tmp_path: Path, old: str, new: str, *, inputs: str = "") -> Path:
    root = copy_shipped(tmp_path / "p", ("agents.d", "tasks.d", "examples/data"))
    task = root / "tasks.d" / "daily_report.yaml"
    text = task.read_text()
    assert old in text
    text = text.replace(old, new, 1)
    task.write_text(text.replace("inputs:\n", f"inputs:\n{inputs}", 1) if inputs else text)
    return root


def test_validate_refuses_a_bad_operator_and_aggregation_at_their_place(tmp_path: Path) -> None:
    root = project_with(tmp_path, GOOD_FILTER, GOOD_FILTER.replace('op: "=="', 'op: "=>"'))
    task = root / "tasks.d" / "daily_report.yaml"
    task.write_text(task.read_text().replace("aggregations: {revenue: sum, units: sum}", "aggregations: {revenue: total, units: sum}", 1))
    result = run_cli(root, None, "validate")
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert (f"tasks.d/daily_report.yaml:24:38: error: /pipeline/steps/1/args/filters/0/op: invalid argument for tool "
            f"'query_table': Input should be {ALLOWED} (got '=>')") in lines  # fmt: skip
    assert any("/pipeline/steps/3/args/aggregations/revenue:" in line and "(got 'total')" in line for line in lines)
    assert "Traceback" not in result.stderr


def test_validate_refuses_an_unknown_argument_and_accepts_the_shipped_tasks(tmp_path: Path) -> None:
    root = project_with(tmp_path, "group_by: [date]\n", "group_by: [date]\n        order: desc\n")
    result = run_cli(root, None, "validate")
    assert result.returncode == 2 and "/pipeline/steps/1/args/order: invalid argument for tool 'query_table'" in result.stdout
    shipped = copy_shipped(tmp_path / "shipped", ("agents.d", "tasks.d", "examples"))
    assert run_cli(shipped, None, "validate").returncode == 0


def test_a_templated_bad_value_fails_its_step_with_a_short_error(tmp_path: Path) -> None:
    root = project_with(
        tmp_path, GOOD_FILTER, GOOD_FILTER.replace('op: "=="', 'op: "{{ inputs.op }}"'),
        inputs='  op: {type: string, default: "=>"}\n',
    )  # fmt: skip
    assert run_cli(root, None, "validate").returncode == 0  # a template: only a run knows its value
    with ScriptedServer({"fallback": "Revenue was steady."}) as model:
        result = run_cli(root, model, "run", "daily_report", "--input", "date=2026-11-30", "--no-report")
    assert result.returncode == 1
    assert f"step day_totals: invalid arguments for tool 'query_table': /filters/0/op: Input should be {ALLOWED} (got '=>')" in result.stderr
    assert "JSON Schema" not in result.stderr and "$defs" not in result.stderr
    assert len(result.stderr) < 3000
