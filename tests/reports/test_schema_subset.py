"""The schema subset check never accepts what jsonschema refuses, and accepts real records.

``conforms`` stands in front of jsonschema in ``validate_record``: ``True`` must mean valid
(Draft 2020-12, as ``Draft202012Validator`` decides), so every case here compares the two.
"""

from __future__ import annotations

import copy
import functools
import json
import math
import random
from collections.abc import Iterator
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from runner.reports.record import fill_usage_rollups, report_schema, validate_record
from runner.reports.schema_subset import conforms
from tests.reports.conftest import make_record

REPLACEMENTS: list[Any] = [
    None, True, 0, 1.0, 2.5, -1, math.inf, "", "x", "../up", "a" * 300, "2026-11-30T06:00:00Z",
    [], ["x", "x"], {}, {"x": 1}, (1,),
]


def _jsonschema_valid(instance: Any, schema: Any) -> bool:
    return bool(_validator(json.dumps(schema)).is_valid(instance))


@functools.cache
def _validator(schema: str) -> Draft202012Validator:
    return Draft202012Validator(json.loads(schema))


def _paths(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield path
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _paths(item, (*path, index))


def _set(document: Any, path: tuple[Any, ...], value: Any) -> Any:
    copied = copy.deepcopy(document)
    if not path:
        return value
    parent = copied
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = value
    return copied


def _records() -> list[dict[str, Any]]:
    full = fill_usage_rollups(make_record())
    return [make_record(), full]


@pytest.mark.parametrize("record", _records(), ids=["record", "with-rollups"])
def test_real_records_are_accepted_without_jsonschema(record: dict[str, Any]) -> None:
    assert _jsonschema_valid(record, report_schema())
    assert conforms(record, report_schema()), "the shipped report schema must stay inside the subset"


@pytest.mark.slow(reason="thousands of records through jsonschema")
def test_every_single_change_to_a_record_is_judged_as_jsonschema_judges_it() -> None:
    """Each value in the record replaced by values of other types and shapes, each key
    deleted, an unknown key added to each object: wherever conforms says valid,
    jsonschema must agree (and without tuples, which JSON has not, they agree both ways)."""
    schema = report_schema()
    record = fill_usage_rollups(make_record())
    counts = {True: 0, False: 0}
    for number, path in enumerate(_one_path_per_place(record)):
        parent = record
        for key in path[:-1]:
            parent = parent[key]
        original = parent[path[-1]]
        start = number * PER_PLACE % len(REPLACEMENTS)  # every replacement used at many places
        changes: list[Any] = [*(REPLACEMENTS * 2)[start : start + PER_PLACE], _DELETED]
        for value in changes:
            if value is _DELETED:
                if isinstance(parent, list):
                    continue
                del parent[path[-1]]
            else:
                parent[path[-1]] = value
            counts[_judge(record, schema, f"{path}: {original!r} -> {value!r}", exact=not isinstance(value, tuple))] += 1
            parent[path[-1]] = original
        if isinstance(original, dict):
            original["unexpected_key"] = 1
            counts[_judge(record, schema, f"{path}: an unexpected key", exact=True)] += 1
            del original["unexpected_key"]
    assert counts[True] > 100 and counts[False] > 500  # both answers were exercised


_DELETED = object()
PER_PLACE = 7


def _one_path_per_place(record: dict[str, Any]) -> list[tuple[Any, ...]]:
    """One path for each place in the schema and type of value found there (table rows and
    list items repeat their shape; checking each again costs time and finds nothing new)."""
    chosen: dict[tuple[Any, ...], tuple[Any, ...]] = {}
    for path in _paths(record):
        value: Any = record
        for key in path:
            value = value[key]
        place = tuple("*" if isinstance(key, int) else key for key in path)
        if place[:1] == ("usage",) and len(place) > 2:
            place = ("usage", place[1], "*", *place[3:])  # rollups keyed by agent, model, step
        chosen.setdefault((*place, type(value).__name__), path)
    return [path for path in chosen.values() if path]


def _judge(record: dict[str, Any], schema: dict[str, Any], change: str, *, exact: bool) -> bool:
    expected = _jsonschema_valid(record, schema)
    got = conforms(record, schema)
    assert not (got and not expected), f"accepted what jsonschema refuses: {change}"
    if exact:
        assert got == expected, f"disagrees with jsonschema on {change}"
    return got


def test_random_combinations_of_changes_agree_with_jsonschema() -> None:
    schema = report_schema()
    record = fill_usage_rollups(make_record())
    paths = [path for path in _paths(record) if path]
    chooser = random.Random(20261130)
    for _ in range(300):
        mutant = record
        for path in chooser.sample(paths, 3):
            try:
                mutant = _set(mutant, path, chooser.choice(REPLACEMENTS))
            except (KeyError, IndexError, TypeError):
                continue  # an earlier change removed the path's parent
        assert conforms(mutant, schema) == _jsonschema_valid(mutant, schema)


# --- each keyword, on the corners where Python and JSON Schema differ --------------------------

KEYWORD_CASES: list[tuple[Any, Any]] = [
    ({"type": "integer"}, 1.0),
    ({"type": "integer"}, 1.5),
    ({"type": "integer"}, True),
    ({"type": "number"}, False),
    ({"type": "number"}, 3),
    ({"type": "array"}, (1, 2)),
    ({"type": "object"}, []),
    ({"type": ["string", "null"]}, None),
    ({"type": ["string", "null"]}, 0),
    ({"enum": [1, "a", None]}, True),
    ({"enum": [1, "a", None]}, 1.0),
    ({"enum": [True]}, 1),
    ({"enum": [[1, True]]}, [1, True]),
    ({"enum": [[1, True]]}, [True, 1]),
    ({"enum": [{"a": [0]}]}, {"a": [False]}),
    ({"const": "runner.report/v1"}, "runner.report/v1"),
    ({"const": 0}, False),
    ({"const": None}, None),
    ({"minimum": 0}, -0.0),
    ({"minimum": 0}, -1),
    ({"minimum": 0}, "-1"),
    ({"maximum": 1}, 1.0000001),
    ({"maxLength": 2}, "ab"),
    ({"maxLength": 2}, "\U0001f600\U0001f600\U0001f600"),
    ({"minLength": 1}, ""),
    ({"pattern": "b"}, "abc"),
    ({"pattern": "^b"}, "abc"),
    ({"pattern": "^a$"}, "a\n"),
    ({"required": ["a"]}, {"b": 1}),
    ({"required": ["a"]}, ["a"]),
    ({"properties": {"a": {"type": "string"}}, "additionalProperties": False}, {"a": "x"}),
    ({"properties": {"a": {"type": "string"}}, "additionalProperties": False}, {"a": "x", "b": 1}),
    ({"patternProperties": {"^max_": {"type": "number"}}, "additionalProperties": False}, {"max_x": 1}),
    ({"patternProperties": {"^max_": {"type": "number"}}, "additionalProperties": False}, {"max_x": "1"}),
    ({"patternProperties": {"^max_": {"type": "number"}}, "additionalProperties": False}, {"min_x": 1}),
    ({"additionalProperties": {"type": "integer"}}, {"a": 1, "b": 2.0}),
    ({"additionalProperties": {"type": "integer"}}, {"a": "1"}),
    ({"items": {"type": "string"}}, ["a", 1]),
    ({"items": {"type": "string"}}, "not an array"),
    ({"items": False}, []),
    ({"items": False}, [1]),
    ({"oneOf": [{"type": "number"}, {"type": "integer"}]}, 1),
    ({"oneOf": [{"type": "number"}, {"type": "integer"}]}, 1.5),
    ({"oneOf": [{"type": "string"}, {"type": "null"}]}, 1),
    ({"uniqueItems": True}, ["a", "b"]),
    ({"uniqueItems": True}, ["a", "a"]),
    ({"$defs": {"d": {"type": "string"}}, "$ref": "#/$defs/d"}, "x"),
    ({"$defs": {"d": {"type": "string"}}, "$ref": "#/$defs/d"}, 1),
    ({"$defs": {"d": {"type": "string"}}, "$ref": "#/$defs/d", "maxLength": 0}, "x"),
    ({"$defs": {"a/b": {"type": "string"}}, "$ref": "#/$defs/a~1b"}, 1),
    ({"format": "date-time"}, "not a date"),
    ({"description": "only words", "title": "t"}, 1),
    (True, 1),
    (False, 1),
]


@pytest.mark.parametrize(("schema", "instance"), KEYWORD_CASES)
def test_each_keyword_decides_as_jsonschema(schema: Any, instance: Any) -> None:
    assert conforms(instance, schema) == _jsonschema_valid(instance, schema), (schema, instance)


@pytest.mark.parametrize(
    ("schema", "instance"),
    [
        ({"allOf": [{"type": "string"}]}, "x"),  # a keyword outside the subset
        ({"not": {"type": "null"}}, "x"),
        ({"prefixItems": [{"type": "string"}], "items": {"type": "string"}}, ["x"]),
        ({"$ref": "other.json#/x"}, "x"),  # a reference to another document
        ({"$ref": "#/$defs/missing"}, "x"),
        ({"properties": {"a": {"$id": "https://elsewhere/", "type": "string"}}}, {"a": "x"}),
        ({"uniqueItems": True}, [1, True]),  # uniqueness of non-strings: jsonschema decides
        ({"type": "decimal"}, "x"),
    ],
)
def test_beyond_the_subset_is_never_accepted(schema: dict[str, Any], instance: Any) -> None:
    """What the subset does not know goes to jsonschema (False here), even when valid."""
    assert conforms(instance, schema) is False


def test_an_invalid_record_still_gets_jsonschema_messages() -> None:
    record = make_record()
    record["steps"][0]["status"] = "exploded"
    with pytest.raises(ValueError, match=r"/steps/0/status: 'exploded' is not one of"):
        validate_record(record)
