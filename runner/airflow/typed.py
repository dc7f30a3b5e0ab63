"""Typed values from templated operator fields. No Airflow imports here.

Airflow renders a templated field to text unless the DAG sets
``render_template_as_native_obj=True``, and a ``null`` param renders as ``"None"``. So every
value an operator hands to runner passes through one of these functions first: each accepts
the value's own type or its text form, and refuses anything else with a
:class:`~runner.errors.UsageError` naming the field, so the task fails without retries and
before any model call.

:func:`typed_caps` is the one place that turns a caps mapping into :class:`Caps`; when the
project's shared cap coercion (``runner.config``) lands, it replaces the body of that function.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

from runner.config.specs import CAP_NAMES, Caps
from runner.errors import UsageError, did_you_mean

ABSENT_TEXT = frozenset({"", "None", "null"})
"""Text a template renders for "no value": an empty string, Python's ``None`` or JSON's ``null``."""

_INTEGER_TEXT = re.compile(r"[+-]?\d+")
_TRUE, _FALSE = frozenset({"true", "1", "yes"}), frozenset({"false", "0", "no"})


def is_absent(value: Any) -> bool:
    """``None``, or text a template renders for a missing value."""
    return value is None or (isinstance(value, str) and value.strip() in ABSENT_TEXT)


def typed_caps(value: Any, field: str) -> Caps:
    """``Caps`` from a mapping (or its JSON text) of cap names to numbers or numeric text.

    Refuses unknown cap names, booleans, NaN, infinity, negative values and anything the
    caps schema (``common.schema.json#/$defs/caps``) refuses. Absent values mean "no cap".
    """
    if is_absent(value):
        return Caps()
    mapping = _mapping(value, field)
    caps: dict[str, Any] = {}
    for name, raw in mapping.items():
        if name not in CAP_NAMES:
            raise UsageError(
                f"{field}: unknown cap '{name}'{did_you_mean(str(name), CAP_NAMES)} (caps: {', '.join(CAP_NAMES)})"
            )
        if not is_absent(raw):
            caps[name] = _cap_value(f"{field}.{name}", name, raw)
    return Caps(**caps)


def optional_int(value: Any, field: str, *, minimum: int | None = None, maximum: int | None = None) -> int | None:
    """An integer (or its text), or ``None`` when absent; refuses fractions and booleans."""
    if is_absent(value):
        return None
    number = _integer(value, field)
    _check_range(field, number, minimum, maximum)
    return number


def required_int(value: Any, field: str, *, minimum: int | None = None, maximum: int | None = None) -> int:
    """Like :func:`optional_int`, but a missing value is an error."""
    number = optional_int(value, field, minimum=minimum, maximum=maximum)
    if number is None:
        raise UsageError(f"{field}: a value is required")
    return number


def optional_number(value: Any, field: str, *, minimum: float | None = None, positive: bool = False) -> float | None:
    """A finite number (or its text), or ``None`` when absent; refuses NaN, infinity and booleans."""
    if is_absent(value):
        return None
    number = _number(value, field)
    if positive and number <= 0:
        raise UsageError(f"{field}: {number:g} must be greater than 0")
    _check_range(field, number, minimum, None)
    return number


def optional_text(value: Any, field: str) -> str | None:
    """Non-empty text, or ``None`` when absent; refuses numbers, lists and mappings."""
    if is_absent(value):
        return None
    if not isinstance(value, str):
        raise UsageError(f"{field}: expected text, got {type(value).__name__} {value!r}")
    return value.strip()


def required_text(value: Any, field: str) -> str:
    """Non-empty text; a missing value is an error."""
    text = optional_text(value, field)
    if text is None:
        raise UsageError(f"{field}: a value is required")
    return text


def choice(value: Any, field: str, choices: tuple[str, ...]) -> str | None:
    """One of ``choices``, or ``None`` when absent."""
    text = optional_text(value, field)
    if text is not None and text not in choices:
        raise UsageError(f"{field}: '{text}' is not one of {', '.join(choices)}{did_you_mean(text, choices)}")
    return text


def flag(value: Any, field: str, *, default: bool = False) -> bool:
    """A boolean, or its text (``true``/``false``, ``1``/``0``, ``yes``/``no``)."""
    if is_absent(value):
        return default
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    raise UsageError(f"{field}: expected true or false, got {value!r}")


def text_list(value: Any, field: str) -> tuple[str, ...]:
    """A list of text items: a list, its JSON text, or one item as text."""
    if is_absent(value):
        return ()
    if isinstance(value, str):
        stripped = value.strip()
        value = _json(stripped, field) if stripped.startswith("[") else [stripped]
    if not isinstance(value, list | tuple) or not all(isinstance(item, str) for item in value):
        raise UsageError(f"{field}: expected a list of text items, got {value!r}")
    return tuple(item.strip() for item in value)


# --- internals ----------------------------------------------------------------------------


def _mapping(value: Any, field: str) -> Mapping[str, Any]:
    if isinstance(value, str):
        value = _json(value.strip(), field)
    if not isinstance(value, Mapping):
        raise UsageError(f"{field}: expected a mapping of cap names to numbers, got {value!r}")
    return value


def _json(text: str, field: str) -> Any:
    try:
        return json.loads(text, parse_constant=_refuse_constant)
    except ValueError as exc:
        raise UsageError(f"{field}: {text!r} is not valid JSON ({exc})") from None


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a finite number")


def _cap_value(field: str, name: str, raw: Any) -> int | float:
    from runner.config.schema import schema, validate_value

    rules = schema("common")["$defs"]["caps"]["properties"][name]
    value: int | float = _integer(raw, field) if rules["type"] == "integer" else _number(raw, field)
    problems = validate_value(value, rules)
    if problems:
        raise UsageError(f"{field}: {problems[0].removeprefix(': ')}")
    return value


def _integer(value: Any, field: str) -> int:
    if isinstance(value, bool):
        raise UsageError(f"{field}: expected an integer, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    if isinstance(value, str) and _INTEGER_TEXT.fullmatch(value.strip()):
        return int(value.strip())
    raise UsageError(f"{field}: expected an integer, got {value!r}")


def _number(value: Any, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise UsageError(f"{field}: expected a number, got {value!r}")
    try:
        number = float(value.strip() if isinstance(value, str) else value)
    except ValueError:
        raise UsageError(f"{field}: expected a number, got {value!r}") from None
    if not math.isfinite(number):
        raise UsageError(f"{field}: {value!r} is not a finite number")
    return number


def _check_range(field: str, number: float, minimum: float | None, maximum: float | None) -> None:
    if minimum is not None and number < minimum:
        raise UsageError(f"{field}: {number:g} is less than the minimum of {minimum:g}")
    if maximum is not None and number > maximum:
        raise UsageError(f"{field}: {number:g} is more than the maximum of {maximum:g}")
