"""Turn raw input values (CSV cells, JSON values, ``--input k=v`` strings) into typed task inputs.

Shared by batch rows and ``runner run --input``. The rules, per :class:`InputSpec` type:

- ``string``: text; an integer is accepted as its decimal text (ids read from Parquet).
- ``integer``: an integer, or text like ``42``/``-7``; ``1.5``, ``1e3``, ``true`` are refused.
- ``number``: a finite int or float, or text like ``3``/``-0.25``/``1e-3``; NaN and Infinity are refused.
- ``boolean``: ``true/false``, ``yes/no``, ``y/n``, ``on/off``, ``1/0`` (any case), or a real boolean.
- ``date``: ``YYYY-MM-DD``, ``today`` or ``yesterday``, or a date value; returned as ISO text.

An absent value, ``None``, NaN or an empty/blank string is *empty*: it takes the default when
there is one, is ``None`` for an optional input, and is an error for a required one. Values are
returned as JSON types (dates as ISO strings), so they can be journaled and hashed.
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
import numbers
import re
from collections.abc import Iterable, Mapping
from typing import Any

from runner.config.specs import InputSpec, TaskSpec
from runner.errors import InputError, did_you_mean

_INTEGER = re.compile(r"[+-]?[0-9]{1,30}")  # ASCII digits only ("５" is not 5); INT64 bounds the value
_NUMBER = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")
_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
INT64 = range(-(2**63), 2**63)
"""Integers an input may hold: what the stores (SQLite, PostgreSQL BIGINT, Parquet) can keep."""
_TRUE = frozenset({"true", "yes", "y", "on", "1"})
_FALSE = frozenset({"false", "no", "n", "off", "0"})
DATE_WORDS = ("today", "yesterday")


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()
"""No value at all (an absent column or key), as opposed to an empty one."""


class _Invalid(ValueError):
    """A value that does not fit its type; the message says what was expected."""


def is_empty(raw: Any) -> bool:
    """Whether ``raw`` counts as no value: ``None``, NaN/NaT/NA, or blank text."""
    if raw is None or raw is MISSING:
        return True
    if isinstance(raw, str):
        return raw.strip() == ""
    if isinstance(raw, float):
        return math.isnan(raw)
    if type(raw).__name__ in ("NAType", "NaTType"):  # pandas.NA / pandas.NaT, without importing pandas
        return True
    try:  # numpy.float32('nan') and other NaN-like scalars
        return bool(raw != raw)
    except (TypeError, ValueError):
        return False


def coerce_input(
    spec: InputSpec, raw: Any, *, source: str, label: str | None = None, today: dt.date | None = None
) -> Any:
    """The typed value of input ``spec`` from ``raw``, or :class:`InputError`.

    ``source`` says where the value came from (``"--input"``, ``"tickets.csv row 12 (id 'T-12')"``)
    and starts the error message; ``label`` names the value in it (default ``input 'NAME'``; batch
    rows say ``column 'COLUMN'``); ``today`` resolves ``today``/``yesterday`` (default: local date).
    Pass :data:`MISSING` as ``raw`` when there is no value at all (not even an empty one).
    """
    label = label or f"input '{spec.name}'"
    if is_empty(raw):
        return _empty_value(spec, raw, source=source, label=label, today=today)
    try:
        value = _CONVERTERS[spec.type](raw, today or dt.date.today())
    except _Invalid as exc:
        raise InputError(f"{source}: {label}: expected {exc}, got {describe(raw)}") from None
    if spec.enum is not None and value not in _enum_values(spec):
        choices = ", ".join(describe(v) for v in _enum_values(spec))
        raise InputError(f"{source}: {label}: expected one of {choices}, got {describe(raw)}")
    return value


def coerce_inputs(
    specs: Iterable[InputSpec],
    raw: Mapping[str, Any],
    *,
    source: str,
    labels: Mapping[str, str] | None = None,
    today: dt.date | None = None,
) -> dict[str, Any]:
    """Typed values for every input in ``specs`` from ``raw`` (input name -> raw value).

    Defaults fill absent or empty values. Unknown names are refused. All problems of ``raw``
    are reported together in one :class:`InputError`, one per line. ``labels`` maps input
    names to how messages name them (see :func:`coerce_input`).
    """
    specs = tuple(specs)
    known = {spec.name for spec in specs}
    problems = [_unknown_message(name, known, source) for name in raw if name not in known]
    values: dict[str, Any] = {}
    for spec in specs:
        label = (labels or {}).get(spec.name)
        try:
            values[spec.name] = coerce_input(spec, raw.get(spec.name, MISSING), source=source, label=label, today=today)
        except InputError as exc:
            problems.append(str(exc))
    if problems:
        raise InputError("\n".join(problems))
    return values


def resolve_defaults(
    specs: Iterable[InputSpec], given: Mapping[str, Any], today: dt.date | None = None
) -> dict[str, Any]:
    """``given`` plus the default of every input it lacks; ``today``/``yesterday`` become ISO dates."""
    out = dict(given)
    for spec in specs:
        if spec.name not in out and spec.has_default:
            out[spec.name] = resolve_date_word(spec.default, today) if spec.type == "date" else spec.default
    return out


def resolve_date_word(value: Any, today: dt.date | None = None) -> Any:
    """``today``/``yesterday`` as an ISO date; anything else unchanged."""
    if isinstance(value, str) and value.strip().lower() in DATE_WORDS:
        day = today or dt.date.today()
        return (day if value.strip().lower() == "today" else day - dt.timedelta(days=1)).isoformat()
    return value


def describe(raw: Any) -> str:
    """A short, printable rendering of a raw value for error messages."""
    if raw is None:
        return "null"
    if isinstance(raw, bool):
        return f"boolean {str(raw).lower()}"
    if isinstance(raw, str):
        text = raw.encode("utf-8", "backslashreplace").decode("utf-8")
        return repr(text if len(text) <= 60 else text[:57] + "...")
    if isinstance(raw, dict | list):
        return "an object" if isinstance(raw, dict) else "a list"
    return repr(raw)


# --- converters -----------------------------------------------------------------------


def _empty_value(spec: InputSpec, raw: Any, *, source: str, label: str, today: dt.date | None) -> Any:
    if spec.has_default:
        if is_empty(spec.default):
            return None
        return coerce_input(spec, spec.default, source=source, label=f"{label} (its default)", today=today)
    if spec.required:
        what = "missing" if raw is MISSING else f"empty ({describe(raw)})"
        raise InputError(f"{source}: {label}: a value is required, but it is {what}")
    return None


def _to_string(raw: Any, today: dt.date) -> str:
    if isinstance(raw, str):
        return raw
    if isinstance(raw, numbers.Integral) and not isinstance(raw, bool):
        return str(int(raw))
    raise _Invalid("a string")


def _to_integer(raw: Any, today: dt.date) -> int:
    if isinstance(raw, bool):
        raise _Invalid("an integer")
    value: int | None = None
    whole = isinstance(raw, float | decimal.Decimal) and math.isfinite(raw) and raw == int(raw)
    if isinstance(raw, numbers.Integral) or whole:
        value = int(raw)
    elif isinstance(raw, str) and _INTEGER.fullmatch(raw.strip()):
        value = int(raw.strip())
    if value is None:
        raise _Invalid("an integer")
    if value not in INT64:
        raise _Invalid("an integer from -2^63 to 2^63-1")
    return value


def _to_number(raw: Any, today: dt.date) -> int | float:
    if isinstance(raw, bool):
        raise _Invalid("a number")
    if isinstance(raw, numbers.Integral) and int(raw) in INT64:
        return int(raw)
    if isinstance(raw, numbers.Real | decimal.Decimal) and not isinstance(raw, numbers.Integral) and math.isfinite(raw):
        return float(raw)
    if isinstance(raw, str) and _NUMBER.fullmatch(raw.strip()):
        text = raw.strip()
        value = int(text) if _INTEGER.fullmatch(text) and int(text) in INT64 else float(text)
        if math.isfinite(value):
            return value
    raise _Invalid("a finite number")


def _to_boolean(raw: Any, today: dt.date) -> bool:
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, numbers.Integral) and int(raw) in (0, 1):
        return bool(int(raw))
    if isinstance(raw, str) and raw.strip().lower() in _TRUE | _FALSE:
        return raw.strip().lower() in _TRUE
    if type(raw).__name__ == "bool_":  # numpy.bool_
        return bool(raw)
    raise _Invalid("a boolean (true/false, yes/no, 1/0)")


def _to_date(raw: Any, today: dt.date) -> str:
    if isinstance(raw, dt.datetime):
        if raw.time() != dt.time(0) or raw.tzinfo is not None:
            raise _Invalid("a date without a time of day (YYYY-MM-DD)")
        return raw.date().isoformat()
    if isinstance(raw, dt.date):
        return raw.isoformat()
    if isinstance(raw, str):
        text = raw.strip()
        if text.lower() in DATE_WORDS:
            return str(resolve_date_word(text, today))
        if _DATE.fullmatch(text):
            try:
                return dt.date.fromisoformat(text).isoformat()
            except ValueError:
                raise _Invalid("a valid calendar date (YYYY-MM-DD)") from None
    raise _Invalid("a date (YYYY-MM-DD, today or yesterday)")


_CONVERTERS = {
    "string": _to_string,
    "integer": _to_integer,
    "number": _to_number,
    "boolean": _to_boolean,
    "date": _to_date,
}


def _enum_values(spec: InputSpec) -> tuple[Any, ...]:
    # YAML reads an unquoted 2024-01-31 as a date; compare dates as ISO text like the values.
    return tuple(v.isoformat() if isinstance(v, dt.date) else v for v in spec.enum or ())


def _unknown_message(name: str, known: set[str], source: str) -> str:
    hint = did_you_mean(name, sorted(known))
    listed = ", ".join(sorted(known)) or "none"
    return f"{source}: unknown input '{name}'{hint} (task inputs: {listed})"


def resolve_inputs(task: TaskSpec, raw: Mapping[str, Any], today: dt.date) -> dict[str, Any]:
    """Typed inputs for one run, defaults filled in; :class:`~runner.errors.InputError` names
    every bad or missing input at once. The same coercion as a batch row, so ``runner run
    --input`` and ``runner batch`` accept and refuse exactly the same values."""
    return coerce_inputs(task.inputs, raw, source=f"task '{task.name}'", today=today)
