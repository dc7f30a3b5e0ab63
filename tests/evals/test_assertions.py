"""Each assertion kind on one case, with its neighbours: paths into JSON and into text that
holds JSON, dataset cells as text, empty cells, tolerance, run status, cost and latency."""

from __future__ import annotations

from typing import Any

import pytest

from runner.config.evals import parse_assertion
from runner.evals.assertions import CaseRun, check, check_case, same, value_at
from runner.evals.cases import parse_case_checks

DONE = CaseRun("completed", {"category": "billing", "items": [{"n": 2}, {"n": 3.5}], "ok": True, "note": "Refund Due"},
               cost_usd=0.001, latency_seconds=1.5)


def verdict(raw: dict[str, Any], run: CaseRun = DONE, **values: Any) -> bool | None:
    return check(parse_assertion(raw), run, values).passed


@pytest.mark.parametrize(("raw", "values", "passed"), [
    ({"path": "category", "equals": "billing"}, {}, True),
    ({"path": "category", "equals": "Billing"}, {}, False),
    ({"path": "category", "equals": "Billing", "ignore_case": True}, {}, True),
    ({"path": "category", "equals": {"column": "want"}}, {"want": "billing"}, True),
    ({"path": "category", "equals": {"column": "want"}}, {"want": "bug"}, False),
    ({"path": "category", "equals": {"column": "want"}}, {"want": ""}, None),  # empty cell: not applicable
    ({"path": "category", "equals": {"column": "want"}}, {}, None),
    ({"path": "items.1.n", "equals": {"column": "want"}}, {"want": "3.5"}, True),  # a CSV cell is text
    ({"path": "items.0.n", "equals": 2.0}, {}, True),
    ({"path": "ok", "equals": {"column": "want"}}, {"want": "true"}, True),
    ({"path": "ok", "equals": 1}, {}, False),  # a boolean is not a number
    ({"path": "items.-1.n", "equals": 3.5}, {}, True),
    ({"path": "items.5.n", "equals": 3.5}, {}, False),
    ({"path": "note", "contains": "refund", "ignore_case": True}, {}, True),
    ({"path": "note", "contains": "refund"}, {}, False),
    ({"contains": "\"billing\""}, {}, True),  # the whole output, as JSON text
    ({"path": "note", "regex": "^Refund\\b"}, {}, True),
    ({"path": "note", "regex": "^due", "ignore_case": True}, {}, False),
    ({"json_schema": {"type": "object", "required": ["category", "items"]}}, {}, True),
    ({"path": "items", "json_schema": {"type": "array", "maxItems": 1}}, {}, False),
    ({"path": "items.1.n", "approx": 3.4, "tolerance": 0.1}, {}, True),
    ({"path": "items.1.n", "approx": 3.0, "tolerance": 0.1}, {}, False),
    ({"path": "items.1.n", "approx": 3.6, "rel_tolerance": 0.05}, {}, True),
    ({"path": "items.1.n", "approx": {"column": "want"}, "tolerance": 0.01}, {"want": "3.5"}, True),
    ({"path": "category", "approx": 1}, {}, False),
    ({"max_cost_usd": 0.001}, {}, True),
    ({"max_cost_usd": 0.0009}, {}, False),
    ({"max_latency_seconds": 2}, {}, True),
    ({"max_latency_seconds": 1}, {}, False),
    ({"status": "completed"}, {}, True),
    ({"status": "capped"}, {}, False),
])
def test_each_kind(raw: dict[str, Any], values: dict[str, Any], passed: bool | None) -> None:
    assert verdict(raw, **values) is passed


def test_a_text_answer_holding_json_is_read_by_path() -> None:
    run = CaseRun("completed", '{"category": "bug"}')
    assert verdict({"path": "category", "equals": "bug"}, run) is True
    assert verdict({"path": "category", "equals": "bug"}, CaseRun("completed", "not json")) is False
    assert value_at("plain", None) == "plain"


def test_a_run_that_did_not_complete_fails_value_checks_and_the_implicit_status_check() -> None:
    capped = CaseRun("capped", None, error="task cap max_cost_usd=0.01 reached")
    results = check_case([parse_assertion({"path": "category", "equals": "bug"})], capped, {})
    assert [(r.label, r.passed) for r in results] == [("completed", False), ("equals category", False)]
    assert "the run capped: task cap" in results[1].detail
    status = check_case([parse_assertion({"status": "capped"})], capped, {})
    assert [(r.label, r.passed) for r in status] == [("status", True)]  # an explicit status replaces "completed"


def test_latency_unknown_fails_a_latency_limit() -> None:
    assert verdict({"max_latency_seconds": 5}, CaseRun("not_run")) is False


def test_failure_details_say_what_was_found() -> None:
    result = check(parse_assertion({"path": "category", "equals": "bug"}), DONE, {})
    assert result.detail == 'got "billing", expected "bug"'
    missing = check(parse_assertion({"path": "nope.x", "equals": 1}), DONE, {})
    assert missing.passed is False and "no 'nope.x'" in missing.detail


def test_equality_across_types() -> None:
    assert same(3, 3.0) and same(3, "3") and not same("3", 3) and not same(True, 1) and same(None, "null")


@pytest.mark.parametrize(("cell", "message"), [
    ("not json", "Expecting value"),
    ('{"path": "x"}', "an assertion needs exactly one of"),
    ('[{"equals": 1, "bogus": 2}]', "Additional properties are not allowed"),
    ('[{"regex": "("}]', "assertion 1/regex: invalid regular expression"),
    ("3", "expected a JSON list of assertions"),
])
def test_bad_case_checks_are_refused_with_the_reason(cell: str, message: str) -> None:
    with pytest.raises(ValueError) as caught:
        parse_case_checks(cell)
    assert message in str(caught.value)


def test_case_checks_accept_a_list_or_one_mapping() -> None:
    assert [a.kind for a in parse_case_checks('[{"path": "a", "equals": 1}, {"max_cost_usd": 1}]')] == ["equals", "max_cost_usd"]
    assert [a.kind for a in parse_case_checks([{"status": "failed"}])] == ["status"]
