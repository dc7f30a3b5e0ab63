"""One parser for cap values arriving from outside the YAML: command-line flags (``--max-cost-usd``,
``--row-max-steps``, ...), the Python API's ``caps=`` / ``row_caps=`` mappings and Airflow
operators, whose templated ``caps={"max_cost_usd": "{{ params.budget }}"}`` render strings.

YAML caps are checked by the JSON Schema; these doors all go through :func:`coerce_cap` /
:func:`coerce_caps`, which apply the same bounds, read from that schema
(``common.schema.json#/$defs/caps``), so a value means the same wherever it comes from:

* numbers, or strings holding a decimal number (surrounding spaces allowed);
* refused: NaN, infinities (also ``1e999``, which overflows), booleans, empty strings and
  ``"None"`` (a template that rendered nothing must not silently mean "no cap"), hex,
  underscores, and any other type;
* integer caps (steps, tool calls, tokens) need a whole number (``10`` or ``10.0``);
* zero: allowed for ``max_tool_calls`` (no tool calls) and ``max_cost_usd`` (free models
  only, such as the embedded one); refused for ``max_steps`` and the token caps (no call
  could be made) and ``max_wall_seconds``; negative values are refused everywhere.

``None`` for a cap means "not set", as in :class:`~runner.config.specs.Caps`.
"""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache

from runner.config.specs import CAP_NAMES, Caps
from runner.errors import UsageError, did_you_mean

_DECIMAL = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
UNITS = {
    "max_steps": "model calls",
    "max_tool_calls": "tool calls",
    "max_input_tokens": "prompt tokens",
    "max_output_tokens": "completion tokens",
    "max_tokens": "tokens",
    "max_cost_usd": "US dollars",
    "max_wall_seconds": "seconds",
}


class CapValueError(ValueError):
    """A value a cap cannot take; the message says why and what to give instead (without the place)."""


@dataclass(frozen=True)
class CapBounds:
    """The allowed values of one cap, as its JSON Schema states them."""

    integer: bool
    minimum: float
    exclusive_minimum: bool
    maximum: float | None

    def describe(self, unit: str) -> str:
        low = f"more than {_fmt(self.minimum)}" if self.exclusive_minimum else f"at least {_fmt(self.minimum)}"
        high = f" and at most {_fmt(self.maximum)}" if self.maximum is not None else ""
        return f"{'a whole number of' if self.integer else 'a number of'} {unit}, {low}{high}"


@cache
def cap_bounds(name: str) -> CapBounds:
    """The bounds of cap ``name`` (one of ``CAP_NAMES``) from ``common.schema.json``."""
    from runner.config.schema import schema  # jsonschema is imported there: only when a cap is given

    spec = schema("common")["$defs"]["caps"]["properties"][name]
    exclusive = "exclusiveMinimum" in spec
    return CapBounds(
        integer=spec["type"] == "integer",
        minimum=float(spec["exclusiveMinimum"] if exclusive else spec.get("minimum", 0)),
        exclusive_minimum=exclusive,
        maximum=float(spec["maximum"]) if "maximum" in spec else None,
    )


def coerce_cap(name: str, value: object) -> int | float:
    """``value`` as the cap ``name``: an ``int`` for integer caps, else a ``float``.

    Raises :class:`CapValueError` (the reason and the fix, not the place) for anything
    this module refuses; ``KeyError`` for an unknown cap name.
    """
    bounds = cap_bounds(name)
    number, problem = _number(value)
    if number is not None:
        problem = _out_of_bounds(number, bounds, repr(value) if isinstance(value, str) else str(value))
    if problem or number is None:
        raise CapValueError(f"{problem}; give {bounds.describe(UNITS[name])}")
    return int(number) if bounds.integer else number + 0.0  # + 0.0: -0.0 becomes 0.0


def coerce_caps(values: Mapping[str, object] | None, *, source: str = "caps") -> Caps:
    """:class:`Caps` from a mapping of cap names to values (numbers or numeric strings;
    ``None`` leaves a cap unset). The one entry point for caps that do not come from YAML:
    the CLI, :mod:`runner.api` and the Airflow operators.

    Raises :class:`~runner.errors.UsageError` (exit 2) naming ``source.cap``, the value and
    the fix, for an unknown cap name or a value :func:`coerce_cap` refuses.
    """
    if values is None:
        return Caps()
    if not isinstance(values, Mapping):
        raise UsageError(f"{source}: expected a mapping of cap names to numbers, got {type(values).__name__}")
    chosen: dict[str, int | float] = {}
    for key, value in values.items():
        if key not in CAP_NAMES:
            raise UsageError(f"{source}: unknown cap {key!r}{did_you_mean(str(key), CAP_NAMES)} (caps: {', '.join(CAP_NAMES)})")
        if value is None:
            continue
        try:
            chosen[key] = coerce_cap(key, value)
        except CapValueError as exc:
            raise UsageError(f"{source}.{key}: {exc}") from None
    return Caps(**chosen)  # type: ignore[arg-type]


def _number(value: object) -> tuple[float | None, str | None]:
    """The value as a float, or why it is not a number."""
    if isinstance(value, bool):
        return None, f"{value} is a boolean, not a number"
    if isinstance(value, str):
        text = value.strip()
        if text.lower().lstrip("+-") in ("nan", "inf", "infinity"):
            return float(text), None  # refused as not finite, with that reason
        if not _DECIMAL.fullmatch(text):
            unset = text.lower() in ("", "none", "null")
            return None, f"{value!r} is not a number" + (" (to set no cap, leave it out)" if unset else "")
    elif not isinstance(value, numbers.Real):
        return None, f"{type(value).__name__} {value!r} is not a number"
    try:
        return float(text if isinstance(value, str) else value), None  # type: ignore[arg-type]
    except OverflowError:
        return math.inf, None


def _out_of_bounds(number: float, bounds: CapBounds, shown: str) -> str | None:
    if not math.isfinite(number):
        return f"{shown} is not a finite number"
    if bounds.integer and not number.is_integer():
        return f"{shown} is not a whole number"
    too_low = number <= bounds.minimum if bounds.exclusive_minimum else number < bounds.minimum
    if too_low or (bounds.maximum is not None and number > bounds.maximum):
        return f"{shown} is out of range"
    return None


def _fmt(number: float) -> str:
    return f"{int(number):,}" if number.is_integer() else f"{number:g}"
