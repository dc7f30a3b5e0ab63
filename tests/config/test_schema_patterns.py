"""User JSON Schemas against text from outside: a pattern that backtracks for ever is stopped
(the model chooses the text), and a ``$ref`` that leaves the schema is refused when the
configuration is validated and is a validation problem, never an exception, at run time."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from runner.config.schema import check_schema, validate_value
from runner.untrusted_regex import PatternTooSlow, bounded_validator, compile_problem, search

REPO = Path(__file__).resolve().parents[2]
SLOW = "^(a|aa)+$"
TEXT = "a" * 40 + "!"  # Python's re would take minutes on this


@pytest.mark.slow(reason="patterns that run to their time limit")
def test_a_backtracking_pattern_is_stopped() -> None:
    with pytest.raises(PatternTooSlow) as stopped:
        search(SLOW, TEXT)
    assert "took more than 1 s" in str(stopped.value) and "(a+)+" in str(stopped.value)
    assert search("^a+!$", TEXT) and not search("^b", TEXT) and search("A", "a", ignore_case=True)


def test_an_invalid_pattern_is_named() -> None:
    assert compile_problem("(unclosed") is not None and compile_problem("^ok$") is None
    with pytest.raises(ValueError, match="invalid regular expression"):
        search("(unclosed", "x")


@pytest.mark.slow(reason="patterns that run to their time limit")
@pytest.mark.parametrize(
    "schema",
    [
        {"type": "string", "pattern": SLOW},
        {"type": "object", "patternProperties": {SLOW: {}}},
        {"type": "object", "patternProperties": {SLOW: {}}, "additionalProperties": False},
    ],
)
def test_schema_patterns_on_model_output_are_bounded(schema: dict[str, object]) -> None:
    value: object = TEXT if schema["type"] == "string" else {TEXT: 1}
    problems = validate_value(value, schema)
    assert problems and "took more than 1 s" in " ".join(problems)


def test_schema_patterns_still_validate() -> None:
    schema = {"type": "object", "properties": {"id": {"pattern": "^T-[0-9]+$"}}, "patternProperties": {"^x-": {"type": "integer"}},
              "additionalProperties": False}  # fmt: skip
    assert validate_value({"id": "T-12", "x-a": 3}, schema) == []
    assert sorted(validate_value({"id": "no", "x-a": "s", "other": 1}, schema)) == [
        "/id: 'no' does not match '^T-[0-9]+$'", "/x-a: 's' is not of type 'integer'", ": Additional properties are not allowed ('other' was unexpected)",
    ]


def test_a_validator_class_is_extended_once() -> None:
    from jsonschema import Draft7Validator

    assert bounded_validator(Draft7Validator) is bounded_validator(Draft7Validator)


@pytest.mark.parametrize("ref", ["http://127.0.0.1:9/schema.json", "other.json#/x", "#/$defs/missing", "#/properties/0"])
def test_references_that_leave_the_schema_or_point_at_nothing(ref: str) -> None:
    schema = {"$defs": {"there": {"type": "string"}}, "properties": {"a": {"$ref": ref}}}
    assert "does not point inside this schema" in (check_schema(schema) or "")
    assert "cannot be resolved" in " ".join(validate_value({"a": 1}, schema))  # at run time: a problem, not an exception


def test_local_references_are_fine() -> None:
    schema = {"$defs": {"name with space": {"type": "string"}}, "properties": {"a": {"$ref": "#/$defs/name%20with%20space"}}}
    assert check_schema(schema) is None and validate_value({"a": "x"}, schema) == [] and validate_value({"a": 1}, schema)


def test_validate_refuses_an_output_schema_with_a_remote_reference(tmp_path: Path) -> None:
    root = tmp_path / "p"
    (root / "agents.d").mkdir(parents=True)
    (root / "agents.d" / "a.yaml").write_text(
        "apiVersion: runner/v1\nkind: Agent\nname: a\nmodel: {id: scripted}\n"
        "output_schema:\n  type: object\n  properties:\n    x: {$ref: 'http://169.254.169.254/schema.json'}\n"
    )
    done = subprocess.run([sys.executable, "-m", "runner", "validate"], cwd=root, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO)})  # fmt: skip
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "agents.d/a.yaml:6:3: error: /output_schema: not a valid JSON Schema: $ref 'http://169.254.169.254/schema.json' does not point inside" in done.stdout + done.stderr


@pytest.mark.slow(reason="patterns that run to their time limit")
def test_one_validation_shares_its_time_between_many_slow_matches() -> None:
    """A thousand strings against a backtracking pattern would take a thousand seconds at one
    second each (past pytest's timeout); one validation's matches share two seconds."""
    problems = validate_value([TEXT] * 1000, {"type": "array", "items": {"type": "string", "pattern": SLOW}})
    assert len(problems) == 1000 and all("took more than 1 s" in p for p in problems)
