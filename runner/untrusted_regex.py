"""Regular expressions from configuration or data, run over text from outside, with a time limit.

Python's ``re`` has no timeout and backtracks: ``(a+)+$`` against forty ``a`` and a ``!``
runs for hours, and a model's answer (or an eval case's, or an MCP server's tool arguments)
chooses that text. So a pattern a user wrote (an eval's ``regex`` assertion, a ``pattern`` in
a JSON Schema) is matched with the ``regex`` module, whose search stops after
:data:`MATCH_SECONDS` and raises :class:`PatternTooSlow`; ``regex`` reads ``re``'s syntax.

:func:`bounded_validator` gives a jsonschema validator class whose ``pattern``,
``patternProperties`` and ``additionalProperties`` use it; a pattern that takes too long
makes a validation error, not a hang.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from functools import cache
from typing import Any

MATCH_SECONDS = 1.0


class PatternTooSlow(ValueError):
    """A match took longer than :data:`MATCH_SECONDS` (the pattern backtracks on this text)."""

    def __init__(self, pattern: str):
        super().__init__(
            f"the regular expression {_shown(pattern)} took more than {MATCH_SECONDS:g} s on this text (it backtracks: "
            "nested repeats such as (a+)+ ); write it without nested or overlapping repeats"
        )


def compile_problem(pattern: str) -> str | None:
    """Why ``pattern`` is not a regular expression, or ``None``: in Python's ``re`` syntax, the
    language the configuration documents (its messages), and one ``regex`` also reads."""
    import re

    import regex

    for engine in (re, regex):
        try:
            engine.compile(pattern)
        except (engine.error, ValueError, OverflowError, RecursionError) as exc:
            return str(exc)
    return None


_DEADLINE: ContextVar[float | None] = ContextVar("runner_regex_deadline", default=None)


@contextmanager
def shared_deadline(seconds: float = 2 * MATCH_SECONDS) -> Iterator[None]:
    """The searches inside the block (one JSON Schema validation: a pattern may meet a thousand
    strings of one answer) share ``seconds`` between them, on top of each one's own limit."""
    token = _DEADLINE.set(time.monotonic() + seconds)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def search(pattern: str, text: str, *, ignore_case: bool = False) -> bool:
    """Whether ``pattern`` matches somewhere in ``text``; :class:`PatternTooSlow` after
    :data:`MATCH_SECONDS` (or once a :func:`shared_deadline` has passed), ``ValueError`` for
    a pattern that does not compile."""
    import regex

    deadline = _DEADLINE.get()
    limit = MATCH_SECONDS if deadline is None else min(MATCH_SECONDS, deadline - time.monotonic())
    if limit <= 0:
        raise PatternTooSlow(pattern)
    try:
        return regex.search(pattern, text, regex.IGNORECASE if ignore_case else 0, timeout=limit) is not None
    except TimeoutError:
        raise PatternTooSlow(pattern) from None
    except regex.error as exc:
        raise ValueError(f"invalid regular expression {_shown(pattern)}: {exc}") from None


@cache
def bounded_validator(base: Any) -> Any:
    """``base`` (a jsonschema validator class) with its pattern keywords matched by :func:`search`."""
    from jsonschema import validators

    return validators.extend(
        base, {"pattern": _pattern, "patternProperties": _pattern_properties, "additionalProperties": _additional_properties}
    )


def _matches(pattern: str, text: str) -> tuple[bool, str | None]:
    """``(matched, problem)``: a slow or invalid pattern is a problem, not an exception."""
    try:
        return search(pattern, text), None
    except ValueError as exc:
        return False, str(exc)


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[Any]:
    from jsonschema.exceptions import ValidationError

    if not validator.is_type(instance, "string"):
        return
    matched, problem = _matches(pattern, instance)
    if problem is not None:
        yield ValidationError(problem)
    elif not matched:
        yield ValidationError(f"{_shown(instance)} does not match {pattern!r}")


def _pattern_properties(validator: Any, properties: dict[str, Any], instance: Any, schema: Any) -> Iterator[Any]:
    from jsonschema.exceptions import ValidationError

    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in properties.items():
        for key, value in instance.items():
            matched, problem = _matches(pattern, key)
            if problem is not None:
                yield ValidationError(problem)
                return
            if matched:
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(validator: Any, additional: Any, instance: Any, schema: Any) -> Iterator[Any]:
    from jsonschema.exceptions import ValidationError

    if not validator.is_type(instance, "object"):
        return
    extras, problem = _extras(instance, schema)
    if problem is not None:
        yield ValidationError(problem)
        return
    if validator.is_type(additional, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], additional, path=extra)
    elif not additional and extras:
        listed = ", ".join(repr(each) for each in sorted(extras, key=str))
        yield ValidationError(f"Additional properties are not allowed ({listed} {'was' if len(extras) == 1 else 'were'} unexpected)")


def _extras(instance: dict[str, Any], schema: dict[str, Any]) -> tuple[list[str], str | None]:
    properties = schema.get("properties", {})
    patterns = list(schema.get("patternProperties", {}))
    extras = []
    for key in instance:
        if key in properties:
            continue
        for pattern in patterns:
            matched, problem = _matches(pattern, key)
            if problem is not None:
                return [], problem
            if matched:
                break
        else:
            extras.append(key)
    return extras, None


def _shown(text: str, limit: int = 60) -> str:
    return repr(text if len(text) <= limit else text[: limit - 1] + "…")
