"""Typed values from text or native values: caps, numbers, flags, lists."""

from __future__ import annotations

import math
from typing import Any

import pytest

from runner.config.specs import Caps
from runner.config.typed_values import (
    choice,
    flag,
    optional_int,
    optional_number,
    optional_text,
    required_text,
    text_list,
    typed_cap,
    typed_caps,
)
from runner.errors import UsageError


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({"max_cost_usd": "0.5"}, Caps(max_cost_usd=0.5)),  # what "{{ params.max_cost_usd }}" renders
        ({"max_cost_usd": 0.5, "max_steps": 3}, Caps(max_cost_usd=0.5, max_steps=3)),
        ({"max_steps": "3", "max_tokens": " 100 "}, Caps(max_steps=3, max_tokens=100)),
        ({"max_steps": 3.0}, Caps(max_steps=3)),  # a JSON number that happens to be written 3.0
        ({"max_cost_usd": None}, Caps()),  # a null param rendered natively (or JSON null): no cap
        ({"max_cost_usd": 0}, Caps(max_cost_usd=0.0)),
        ('{"max_cost_usd": 1.25}', Caps(max_cost_usd=1.25)),  # "{{ params.caps | tojson }}"
        ('{"max_cost_usd": null}', Caps()),
        (None, Caps()),
    ],
)
def test_caps_accept_numbers_and_their_text(raw: Any, expected: Caps) -> None:
    caps = typed_caps(raw, "caps")
    assert caps == expected
    assert all(type(v) in (int, float) for v in caps.as_dict().values())


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"max_cost_usd": "nan"}, "caps.max_cost_usd: 'nan' is not a finite number; give a number of US dollars"),
        ({"max_cost_usd": float("nan")}, "not a finite number"),
        ({"max_cost_usd": "inf"}, "not a finite number"),
        ({"max_cost_usd": -1}, "caps.max_cost_usd: -1 is out of range; give a number of US dollars, at least 0"),
        ({"max_cost_usd": "-0.01"}, "out of range"),
        ({"max_cost_usd": "abc"}, "caps.max_cost_usd: 'abc' is not a number"),
        ({"max_cost_usd": "None"}, "'None' is not a number (to set no cap, leave it out)"),  # a null param as text
        ({"max_steps": ""}, "'' is not a number (to set no cap, leave it out)"),
        ({"max_cost_usd": True}, "True is a boolean, not a number"),
        ({"max_cost_usd": [1]}, "is not a number"),
        ({"max_steps": "1.5"}, "caps.max_steps: '1.5' is not a whole number"),
        ({"max_steps": 1.5}, "not a whole number"),
        ({"max_steps": 0}, "caps.max_steps: 0 is out of range"),
        ({"max_wall_seconds": 0}, "out of range; give a number of seconds, more than 0"),
        ({"max_cost_usd": 10**7}, "out of range"),
        ({"max_cost_ud": 1}, "unknown cap 'max_cost_ud'. Did you mean 'max_cost_usd'?"),
        ('{"max_cost_usd": NaN}', "not valid JSON"),
        ("0.5", "expected a mapping of cap names"),
        ([("max_steps", 1)], "expected a mapping of cap names"),
        ("None", "not valid JSON"),
    ],
)
def test_caps_refuse_what_is_not_a_valid_cap(raw: Any, message: str) -> None:
    with pytest.raises(UsageError, match=_literal(message)):
        typed_caps(raw, "caps")


def test_refused_caps_are_usage_errors_exit_2() -> None:
    with pytest.raises(UsageError) as refused:
        typed_caps({"max_cost_usd": "nan"}, "caps")
    assert refused.value.exit_code == 2


@pytest.mark.parametrize(
    ("raw", "expected"), [("4", 4), (4, 4), ("-2", -2), (4.0, 4), (None, None)]
)
def test_optional_int(raw: Any, expected: int | None) -> None:
    assert optional_int(raw, "n") == expected


@pytest.mark.parametrize("raw", ["4.5", 4.5, True, "four", [4], float("inf"), "0x10", "None", ""])
def test_optional_int_refuses(raw: Any) -> None:
    with pytest.raises(UsageError, match=r"^n: expected an integer"):
        optional_int(raw, "n")


def test_int_and_number_bounds() -> None:
    with pytest.raises(UsageError, match="num_shards: 0 is less than the minimum of 1"):
        optional_int("0", "num_shards", minimum=1)
    with pytest.raises(UsageError, match="more than the maximum of 10"):
        optional_int(11, "n", maximum=10)
    with pytest.raises(UsageError, match="rpm: 0 must be greater than 0"):
        optional_number("0", "rpm", positive=True)
    with pytest.raises(UsageError, match="not a finite number"):
        optional_number("-inf", "rpm")
    assert optional_number("1e3", "rpm") == 1000.0
    assert optional_number(None, "rpm") is None
    with pytest.raises(UsageError, match="rpm: expected a number, got 'None'"):
        optional_number("None", "rpm")
    assert not math.isnan(optional_number("0.25", "x") or math.nan)


def test_text_flag_choice_and_lists() -> None:
    assert optional_text(" id ", "id_column") == "id" and optional_text("", "id_column") is None
    with pytest.raises(UsageError, match="id_column: expected text, got int 7"):
        optional_text(7, "id_column")
    with pytest.raises(UsageError, match="task: a value is required"):
        required_text("", "task")
    assert flag("True", "durable") is True and flag("false", "durable") is False and flag(None, "durable") is False
    assert typed_cap("0.5", "options.row_max_cost_usd", "max_cost_usd") == 0.5 and typed_cap(None, "x", "max_steps") is None
    with pytest.raises(UsageError, match=r"^options\.row_max_steps: '0' is out of range; give a whole number of model calls"):
        typed_cap("0", "options.row_max_steps", "max_steps")
    with pytest.raises(UsageError, match="durable: expected true or false"):
        flag("maybe", "durable")
    assert choice("csv", "input_format", ("csv", "jsonl")) == "csv" and choice(None, "f", ("csv",)) is None
    with pytest.raises(UsageError, match=r"'jsonll' is not one of csv, jsonl\. Did you mean 'jsonl'"):
        choice("jsonll", "input_format", ("csv", "jsonl"))
    assert text_list('["subject=title", "body=text"]', "map") == ("subject=title", "body=text")
    assert text_list(["a=b"], "map") == ("a=b",) and text_list("a=b", "map") == ("a=b",)
    assert text_list("[]", "map") == () and text_list(None, "map") == ()
    with pytest.raises(UsageError, match="map: expected a list of text items"):
        text_list("[1, 2]", "map")


def _literal(message: str) -> str:
    import re

    return re.escape(message)
