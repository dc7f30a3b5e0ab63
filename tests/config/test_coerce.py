"""Coercion of raw values to typed task inputs: every type, every kind of bad value."""

from __future__ import annotations

import datetime as dt
import decimal
import math

import pytest

from runner.config.coerce import MISSING, coerce_input, coerce_inputs, resolve_defaults
from runner.config.specs import InputSpec
from runner.errors import InputError

TODAY = dt.date(2024, 3, 1)


def spec(type_: str, **kw: object) -> InputSpec:
    return InputSpec("value", type_, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("type_", "raw", "expected"),
    [
        ("string", "hello", "hello"),
        ("string", " keep spaces ", " keep spaces "),
        ("string", "NA", "NA"),
        ("string", 12345, "12345"),
        ("integer", "42", 42),
        ("integer", " -7 ", -7),
        ("integer", "+3", 3),
        ("integer", 5, 5),
        ("integer", 5.0, 5),
        ("integer", decimal.Decimal("8"), 8),
        ("number", "3", 3),
        ("number", "-0.25", -0.25),
        ("number", "1e-3", 0.001),
        ("number", ".5", 0.5),
        ("number", 2, 2),
        ("number", 2.5, 2.5),
        ("number", decimal.Decimal("1.25"), 1.25),
        ("boolean", "true", True),
        ("boolean", "No", False),
        ("boolean", "Y", True),
        ("boolean", "off", False),
        ("boolean", "1", True),
        ("boolean", 0, False),
        ("boolean", True, True),
        ("date", "2024-02-29", "2024-02-29"),
        ("date", "today", "2024-03-01"),
        ("date", "Yesterday", "2024-02-29"),
        ("date", dt.date(2024, 1, 2), "2024-01-02"),
        ("date", dt.datetime(2024, 1, 2), "2024-01-02"),
    ],
)
def test_good_values(type_: str, raw: object, expected: object) -> None:
    value = coerce_input(spec(type_), raw, source="t", today=TODAY)
    assert value == expected
    assert type(value) is type(expected)


@pytest.mark.parametrize(
    ("type_", "raw", "message"),
    [
        ("string", 1.5, "expected a string, got 1.5"),
        ("string", True, "expected a string, got boolean true"),
        ("string", {"a": 1}, "expected a string, got an object"),
        ("integer", "1.5", "expected an integer, got '1.5'"),
        ("integer", "1e3", "expected an integer, got '1e3'"),
        ("integer", "3.0", "expected an integer, got '3.0'"),
        ("integer", "true", "expected an integer, got 'true'"),
        ("integer", True, "expected an integer, got boolean true"),
        ("integer", 2.5, "expected an integer, got 2.5"),
        ("integer", math.inf, "expected an integer, got inf"),
        ("number", "NaN", "expected a finite number, got 'NaN'"),
        ("number", "inf", "expected a finite number, got 'inf'"),
        ("number", "Infinity", "expected a finite number, got 'Infinity'"),
        ("number", "1_000", "expected a finite number, got '1_000'"),
        ("number", "1e999", "expected a finite number, got '1e999'"),
        ("number", math.inf, "expected a finite number, got inf"),
        ("number", False, "expected a number, got boolean false"),
        ("number", "12 apples", "expected a finite number, got '12 apples'"),
        ("boolean", "maybe", "expected a boolean (true/false, yes/no, 1/0), got 'maybe'"),
        ("boolean", 2, "expected a boolean (true/false, yes/no, 1/0), got 2"),
        ("date", "2024-02-30", "expected a valid calendar date (YYYY-MM-DD), got '2024-02-30'"),
        ("date", "01/02/2024", "expected a date (YYYY-MM-DD, today or yesterday), got '01/02/2024'"),
        ("date", "20240102", "expected a date (YYYY-MM-DD, today or yesterday), got '20240102'"),
        ("date", dt.datetime(2024, 1, 2, 13, 5), "expected a date without a time of day"),
        ("date", 20240102, "expected a date (YYYY-MM-DD, today or yesterday), got 20240102"),
    ],
)
def test_bad_values_say_what_was_expected(type_: str, raw: object, message: str) -> None:
    with pytest.raises(InputError) as caught:
        coerce_input(spec(type_), raw, source="tickets.csv row 7 (id 'T7')", label="column 'value'", today=TODAY)
    assert str(caught.value).startswith("tickets.csv row 7 (id 'T7'): column 'value': ")
    assert message in str(caught.value)


@pytest.mark.parametrize("empty", [None, "", "   ", math.nan, float("nan")])
def test_empty_required_value_is_refused(empty: object) -> None:
    with pytest.raises(InputError, match=r"--input: input 'value': a value is required, but it is empty"):
        coerce_input(spec("number"), empty, source="--input")


def test_missing_differs_from_empty_in_the_message() -> None:
    with pytest.raises(InputError, match="a value is required, but it is missing"):
        coerce_input(spec("string"), MISSING, source="row 1")


def test_pandas_missing_values_are_empty() -> None:
    pd = pytest.importorskip("pandas")
    for empty in (pd.NA, pd.NaT):
        assert coerce_input(spec("string", required=False), empty, source="t") is None


def test_empty_takes_the_default_and_defaults_are_typed() -> None:
    assert coerce_input(spec("integer", default=3, has_default=True), "", source="t") == 3
    assert coerce_input(spec("integer", default="4", has_default=True), None, source="t") == 4
    assert coerce_input(spec("string", required=False), "", source="t") is None
    assert coerce_input(spec("string", default=None, has_default=True), "", source="t") is None
    date_spec = spec("date", default="yesterday", has_default=True)
    assert coerce_input(date_spec, MISSING, source="t", today=TODAY) == "2024-02-29"


def test_a_bad_default_is_named() -> None:
    with pytest.raises(InputError, match=r"input 'value' \(its default\): expected an integer, got 'x'"):
        coerce_input(spec("integer", default="x", has_default=True), "", source="t")


def test_enum() -> None:
    priority = spec("string", enum=("low", "high"))
    assert coerce_input(priority, "low", source="t") == "low"
    with pytest.raises(InputError, match=r"expected one of 'low', 'high', got 'urgent'"):
        coerce_input(priority, "urgent", source="t")
    level = spec("integer", enum=(1, 2, 3))
    assert coerce_input(level, "2", source="t") == 2
    with pytest.raises(InputError, match="expected one of 1, 2, 3, got '4'"):
        coerce_input(level, "4", source="t")
    # YAML reads an unquoted 2024-01-31 as a date object
    day = spec("date", enum=(dt.date(2024, 1, 31),))
    assert coerce_input(day, "2024-01-31", source="t") == "2024-01-31"


def test_coerce_inputs_reports_every_problem_and_unknown_names() -> None:
    specs = [InputSpec("city", "string"), InputSpec("days", "integer"), InputSpec("units", "string", required=False)]
    assert coerce_inputs(specs, {"city": "Oslo", "days": "3"}, source="--input") == {
        "city": "Oslo",
        "days": 3,
        "units": None,
    }
    with pytest.raises(InputError) as caught:
        coerce_inputs(specs, {"cty": "Oslo", "days": "1.5"}, source="--input")
    lines = str(caught.value).splitlines()
    assert lines == [
        "--input: unknown input 'cty'. Did you mean 'city'? (task inputs: city, days, units)",
        "--input: input 'city': a value is required, but it is missing",
        "--input: input 'days': expected an integer, got '1.5'",
    ]


def test_resolve_defaults_fills_absent_inputs_with_dates_resolved() -> None:
    specs = [
        InputSpec("day", "date", default="today", has_default=True, required=False),
        InputSpec("n", "integer", default=5, has_default=True, required=False),
        InputSpec("city", "string"),
    ]
    assert resolve_defaults(specs, {"city": "Oslo"}, TODAY) == {"city": "Oslo", "day": "2024-03-01", "n": 5}
    assert resolve_defaults(specs, {"day": "2020-01-01"}, TODAY)["day"] == "2020-01-01"


def test_invalid_utf8_in_messages_is_printable() -> None:
    with pytest.raises(InputError) as caught:
        coerce_input(spec("integer"), "12\udcff", source="t")
    assert "\\udcff" in str(caught.value)
    str(caught.value).encode("utf-8")  # no lone surrogate reaches a log or the journal
