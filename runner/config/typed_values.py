"""Typed values from text or native values: rendered Airflow templates, API keywords.

Airflow renders a templated field to text unless the DAG sets
``render_template_as_native_obj=True`` (the example DAGs do). So every value an operator
hands to runner passes through one of these functions first: each accepts the value's own
type or its text form, and refuses anything else with a :class:`~runner.errors.UsageError`
naming the field, so the task fails without retries and before any model call. The batch
options (:mod:`runner.batch.options`) are typed by these functions on every surface.

``None`` means "not given". Text that only looks like nothing (``"None"``, what a null
param renders as text) is refused where a number is wanted, as
:mod:`runner.config.capvalues` refuses it for caps: a template that rendered nothing must
not silently lift a limit. Caps go through that module's parser; :func:`typed_caps` and
:func:`typed_cap` are the only places here that call it.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

from runner.config.specs import Caps
from runner.errors import UsageError, did_you_mean

_INTEGER_TEXT = re.compile(r"[+-]?\d+")
_TRUE, _FALSE = frozenset({"true", "1", "yes"}), frozenset({"false", "0", "no"})


def typed_caps(value: Any, field: str) -> Caps:
    """``Caps`` from a mapping (or its JSON text) of cap names to numbers or numeric text.

    :func:`runner.config.capvalues.coerce_caps` decides: it refuses unknown cap names,
    booleans, NaN, infinity, negative values, ``"None"`` and what the caps schema refuses;
    a ``None`` value (JSON ``null``) leaves that cap unset.
    """
    from runner.config.capvalues import coerce_caps

    if value is None:
        return Caps()
    return coerce_caps(_mapping(value, field), source=field)


def typed_cap(value: Any, field: str, cap: str) -> int | float | None:
    """One cap given under another name (a flag such as ``row_max_cost_usd``); ``None`` when not given."""
    from runner.config.capvalues import CapValueError, coerce_cap

    if value is None:
        return None
    try:
        return coerce_cap(cap, value)
    except CapValueError as exc:
        raise UsageError(f"{field}: {exc}") from None


def optional_int(value: Any, field: str, *, minimum: int | None = None, maximum: int | None = None) -> int | None:
    """An integer (or its text), or ``None`` when not given; refuses fractions and booleans."""
    if value is None:
        return None
    number = _integer(value, field)
    _check_range(field, number, minimum, maximum)
    return number


def optional_number(value: Any, field: str, *, minimum: float | None = None, positive: bool = False) -> float | None:
    """A finite number (or its text), or ``None`` when not given; refuses NaN, infinity and booleans."""
    if value is None:
        return None
    number = _number(value, field)
    if positive and number <= 0:
        raise UsageError(f"{field}: {number:g} must be greater than 0")
    _check_range(field, number, minimum, None)
    return number


def optional_text(value: Any, field: str) -> str | None:
    """Text, or ``None`` when not given or empty; refuses numbers, lists and mappings."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise UsageError(f"{field}: expected text, got {type(value).__name__} {value!r}")
    return value.strip() or None


def required_text(value: Any, field: str) -> str:
    """Non-empty text; a missing value is an error."""
    text = optional_text(value, field)
    if text is None:
        raise UsageError(f"{field}: a value is required")
    return text


def choice(value: Any, field: str, choices: tuple[str, ...]) -> str | None:
    """One of ``choices``, or ``None`` when not given."""
    text = optional_text(value, field)
    if text is not None and text not in choices:
        raise UsageError(f"{field}: '{text}' is not one of {', '.join(choices)}{did_you_mean(text, choices)}")
    return text


def flag(value: Any, field: str, *, default: bool = False) -> bool:
    """A boolean, or its text (``true``/``false``, ``1``/``0``, ``yes``/``no``)."""
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    raise UsageError(f"{field}: expected true or false, got {value!r}")


def text_list(value: Any, field: str) -> tuple[str, ...]:
    """A list of text items: a list, its JSON text, or one item as text."""
    if value is None:
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
