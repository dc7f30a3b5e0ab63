"""The record schema, validate_record's messages, and usage rollups."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from runner.reports.record import fill_usage_rollups, record_validator, report_schema, usage_rollups, validate_record


def test_schema_is_valid_draft_2020_12() -> None:
    Draft202012Validator.check_schema(report_schema())


def test_realistic_record_is_valid(record: dict[str, Any]) -> None:
    validate_record(record)
    validate_record(fill_usage_rollups(record))


def test_minimal_record_is_valid() -> None:
    validate_record(
        {
            "schema_version": "runner.report/v1",
            "run_id": "r1",
            "task": "t",
            "status": "failed",
            "exit_code": 1,
            "started_at": "2026-11-30T06:00:00Z",
            "finished_at": "2026-11-30T06:00:01Z",
            "duration_seconds": 1.0,
            "steps": [],
        }
    )


def test_every_problem_is_listed_with_its_pointer(record: dict[str, Any]) -> None:
    record["status"] = "done"
    record["started_at"] = "2026-11-30 06:00"
    record["steps"][1]["usage"]["cost_usd"] = -1
    record["artifacts"][0]["path"] = "../outside.png"
    with pytest.raises(ValueError) as raised:
        validate_record(record)
    message = str(raised.value)
    assert "4 problem(s)" in message
    assert "/status: 'done' is not one of" in message
    assert "/started_at: '2026-11-30 06:00' does not match" in message
    assert "/steps/1/usage/cost_usd: -1 is less than the minimum of 0" in message
    assert "/artifacts/0/path: '../outside.png' does not match" in message


def test_a_nested_problem_gets_jsonschema_wording_and_the_validator_is_built_once(record: dict[str, Any]) -> None:
    record["steps"][0]["status"] = "exploded"
    with pytest.raises(ValueError, match=r"\(1 problem\(s\)\):\n/steps/0/status: 'exploded' is not one of \["):
        validate_record(record)
    assert record_validator() is record_validator()


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda r: r["tables"].update(nope={"columns": ["a"], "rows": []}), "/tables/nope: no step has the id 'nope'"),
        (lambda r: r["tables"]["query_sales"]["rows"].append([1]), "/tables/query_sales/rows/5: 1 cells for 4 columns"),
        (lambda r: r["steps"].append(copy.deepcopy(r["steps"][0])), "/steps/6/id: duplicate step id 'plan'"),
        (lambda r: r.update(exit_code=3), "/exit_code: 3 does not match status 'completed'"),
        (
            lambda r: r.update(finished_at="2026-11-30T05:00:00+00:00"),
            "/finished_at: 2026-11-30T05:00:00+00:00 is before",
        ),
        (lambda r: r["artifacts"][0].update(step="ghost"), "/artifacts/0/step: no step has the id 'ghost'"),
        (lambda r: r["plan"]["steps"][0].update(depends_on=["ghost"]), "/plan/steps/0/depends_on: no plan step"),
    ],
)
def test_cross_reference_problems(record: dict[str, Any], change: Any, expected: str) -> None:
    change(record)
    with pytest.raises(ValueError, match="invalid run record") as raised:
        validate_record(record)
    assert expected in str(raised.value)


def test_rollups_sum_steps_by_agent_model_and_step(record: dict[str, Any]) -> None:
    rollups = usage_rollups(record["steps"])
    assert rollups["total"]["model_calls"] == 7
    assert rollups["total"]["tool_calls"] == 3
    assert rollups["total"]["total_tokens"] == 21_340
    assert rollups["total"]["cost_usd"] == pytest.approx(0.0345)
    assert rollups["by_agent"]["analyst"]["input_tokens"] == 7_200
    assert rollups["by_agent"]["analyst"]["cached_input_tokens"] == 2_048
    assert set(rollups["by_agent"]) == {"planner", "analyst", "writer"}
    assert rollups["by_model"]["gpt-4.1"]["cost_usd"] == pytest.approx(0.0288)
    assert rollups["by_step"]["query_sales"]["tool_calls"] == 1
    assert rollups["by_step"]["query_sales"]["cost_usd"] == 0


def test_fill_keeps_given_rollups_and_does_not_mutate(record: dict[str, Any]) -> None:
    given: dict[str, Any] = {"input_tokens": 1, "output_tokens": 1, "cached_input_tokens": 0, "total_tokens": 2}
    given |= {"cost_usd": 9.0, "model_calls": 1, "tool_calls": 0}
    record["usage"] = {"total": given}
    filled = fill_usage_rollups(record)
    assert filled["usage"]["total"] is given
    assert set(filled["usage"]) == {"total", "by_agent", "by_model", "by_step"}
    assert set(record["usage"]) == {"total"}
