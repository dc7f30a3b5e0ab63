"""Every path by which a user's (or an MCP server's) JSON Schema reaches a regular-expression
engine is bounded: matching in time (``unevaluatedProperties`` asks ``patternProperties`` too,
``propertyNames`` runs ``pattern`` on keys), compiling in memory (``regex`` unrolls
``a{4294967294}``), and a ``$ref`` cycle or a ``$ref`` to a URL is refused, never recursed
into or fetched. Through the real CLI where a person meets it."""

from __future__ import annotations

import http.server
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runner.config.schema import check_schema, validate_value
from runner.model.server import ScriptedServer
from runner.tools.arguments import ArgumentsInvalid, JsonSchemaArguments
from runner.untrusted_regex import MAX_UNROLLED, compile_problem, search
from tests.support.project import run_cli, write_project
from tests.support.serving import serving

SLOW = "^(a|aa)+$"
TEXT = "a" * 40 + "!"  # Python's re backtracks on this for minutes

BACKTRACKING = [
    pytest.param({"type": "object", "patternProperties": {SLOW: {}}, "unevaluatedProperties": False}, id="unevaluated+patternProperties"),
    pytest.param({"allOf": [{"patternProperties": {SLOW: {}}}], "unevaluatedProperties": False}, id="unevaluated-through-allOf"),
    pytest.param({"$defs": {"p": {"patternProperties": {SLOW: {}}}}, "$ref": "#/$defs/p", "unevaluatedProperties": False},
                 id="unevaluated-through-ref"),
    pytest.param({"if": {"type": "object"}, "then": {"patternProperties": {SLOW: {}}}, "unevaluatedProperties": {"type": "string"}},
                 id="unevaluated-through-then"),
    pytest.param({"dependentSchemas": {TEXT: {"patternProperties": {SLOW: {}}}}, "unevaluatedProperties": False}, id="unevaluated-dependentSchemas"),
    pytest.param({"propertyNames": {"pattern": SLOW}}, id="propertyNames"),
    pytest.param({"patternProperties": {SLOW: {}}}, id="patternProperties"),
    pytest.param({"patternProperties": {SLOW: {}}, "additionalProperties": False}, id="additionalProperties"),
]  # fmt: skip

UNROLLED = ["a{4294967294}", "(?:a{1000}){1000}", "(?:(ab|cd){300}){300}", "x{20001}"]


@pytest.mark.slow(reason="patterns that run to their time limit")
@pytest.mark.parametrize("schema", BACKTRACKING)
def test_every_keyword_that_matches_keys_is_bounded(schema: dict[str, Any]) -> None:
    problems = validate_value({TEXT: 1}, schema)
    assert any("took more than 1 s" in p for p in problems), problems


def test_unevaluated_properties_still_decides_as_jsonschema_does() -> None:
    schema = {"properties": {"a": {}}, "patternProperties": {"^x-": {}}, "allOf": [{"properties": {"b": {}}}],
              "unevaluatedProperties": False}  # fmt: skip
    assert validate_value({"a": 1, "x-y": 2, "b": 3}, schema) == []
    assert validate_value({"a": 1, "c": 3, "d": 4}, schema) == [": Unevaluated properties are not allowed ('c', 'd' were unexpected)"]
    typed = {"patternProperties": {"^x-": {}}, "unevaluatedProperties": {"type": "integer"}}
    assert validate_value({"x-a": "s", "n": 1}, typed) == []
    assert "'m' was unevaluated and invalid" in validate_value({"m": "s"}, typed)[0]


@pytest.mark.parametrize("pattern", UNROLLED)
def test_a_pattern_regex_would_unroll_into_gigabytes_is_refused_before_compiling(pattern: str) -> None:
    assert "repeats too much" in (compile_problem(pattern) or "")
    with pytest.raises(ValueError, match="repeats too much"):
        search(pattern, "aaa")
    assert "repeats too much" in " ".join(validate_value("aaa", {"type": "string", "pattern": pattern}))
    assert "repeats too much" in (check_schema({"properties": {"a": {"pattern": pattern}}}) or "")
    assert "repeats too much" in (check_schema({"patternProperties": {pattern: {}}}) or "")


def test_patterns_below_the_limit_and_open_repeats_compile() -> None:
    for pattern in (f"x{{{MAX_UNROLLED}}}", "a{1,4294967294}", "(?:a{0,1000}){0,1000}", "^[A-Z]{3}-[0-9]{4}$", "a+b*"):
        assert compile_problem(pattern) is None, pattern
    assert search("^[A-Z]{3}-[0-9]{4}$", "ABC-1234") and not search("^[A-Z]{3}$", "abcd")


def test_a_pattern_inside_const_or_enum_is_data_not_a_pattern() -> None:
    assert check_schema({"const": {"pattern": "a{4294967294}"}, "enum": [{"pattern": "a{4294967294}"}]}) is None


@pytest.mark.parametrize("schema", [{"$ref": "#"}, {"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}])
def test_a_reference_cycle_is_refused_by_validate_and_a_problem_at_run_time(schema: dict[str, Any]) -> None:
    assert "cycle" in (check_schema(schema) or "")
    assert "nests too deeply" in " ".join(validate_value(1, schema))


def test_a_recursive_schema_that_descends_is_fine() -> None:
    node = {"$defs": {"n": {"type": "object", "properties": {"next": {"$ref": "#/$defs/n"}}}}, "$ref": "#/$defs/n"}
    assert check_schema(node) is None and validate_value({"next": {"next": {}}}, node) == []
    assert validate_value({"next": {"next": 3}}, node) == ["/next/next: 3 is not of type 'object'"]


@pytest.fixture
def listener() -> Iterator[tuple[str, list[str]]]:
    """A real HTTP server that serves any path as a schema, and the paths it was asked for."""
    asked: list[str] = []

    class Schema(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            asked.append(self.path)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(b'{"type": "integer"}')

        def log_message(self, *args: Any) -> None:
            del args

    with serving(http.server.ThreadingHTTPServer(("127.0.0.1", 0), Schema)) as server:
        yield f"http://127.0.0.1:{server.server_port}", asked


def test_a_url_reference_is_never_fetched(listener: tuple[str, list[str]]) -> None:
    url, asked = listener
    schema = {"type": "object", "properties": {"a": {"$ref": f"{url}/metadata"}}}
    with pytest.raises(ArgumentsInvalid, match="does not fetch"):
        JsonSchemaArguments(schema).validate({"a": "x"})
    assert "cannot be resolved" in " ".join(validate_value({"a": "x"}, schema))
    assert asked == []


@pytest.mark.parametrize(
    ("schema", "said"),
    [({"properties": {"a": {"type": "colour"}}}, "is not valid"), ({"properties": {"a": {"minLength": "x"}}}, "is not of type")],
)
def test_an_mcp_schema_that_is_not_json_schema_is_named(schema: dict[str, Any], said: str) -> None:
    problem = JsonSchemaArguments({"type": "object", **schema}).schema_problem()
    assert problem is not None and said in problem and "/properties/a" in problem
    assert JsonSchemaArguments({"type": "object", "properties": {"a": {"type": "string"}}}).schema_problem() is None


@pytest.mark.slow(reason="patterns that run to their time limit")
def test_mcp_arguments_against_bounded_keywords() -> None:
    arguments = JsonSchemaArguments({"type": "object", "patternProperties": {SLOW: {}}, "unevaluatedProperties": False})
    with pytest.raises(ArgumentsInvalid, match="took more than 1 s"):
        arguments.validate({TEXT: 1})


AGENT = """\
apiVersion: runner/v1
kind: Agent
name: a
model: {{id: gpt-4o-mini, max_tokens: 200}}
system_prompt: Reply with JSON.
output_schema: {schema}
caps: {{max_steps: 2}}
"""
TASK = "apiVersion: runner/v1\nkind: Task\nname: t\nagent: a\ngoal: go\n"


def test_run_stops_a_backtracking_unevaluated_properties_schema_with_the_reason(tmp_path: Path) -> None:
    schema = {"type": "object", "patternProperties": {SLOW: {}}, "unevaluatedProperties": False}
    root = write_project(tmp_path / "p", {"agents.d/a.yaml": AGENT.format(schema=json.dumps(schema)), "tasks.d/t.yaml": TASK})
    with ScriptedServer({"fallback": {"content": json.dumps({TEXT: 1})}}) as server:
        done = run_cli(root, server, "run", "t", timeout=240)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr and "took more than 1 s" in done.stderr and "write it without nested" in done.stderr


@pytest.mark.parametrize(
    ("schema", "said"),
    [
        ({"type": "string", "pattern": "a{4294967294}"}, "/output_schema: not a valid JSON Schema: pattern 'a{4294967294}': the regular expression"),
        ({"$ref": "#"}, "/output_schema: not a valid JSON Schema: its references form a cycle"),
    ],
)
def test_validate_names_a_schema_that_would_exhaust_memory_or_recurse(tmp_path: Path, schema: dict[str, Any], said: str) -> None:
    root = write_project(tmp_path / "p", {"agents.d/a.yaml": AGENT.format(schema=json.dumps(schema)), "tasks.d/t.yaml": TASK})
    done = run_cli(root, None, "validate", timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert f"agents.d/a.yaml:6:16: error: {said}" in done.stdout + done.stderr
