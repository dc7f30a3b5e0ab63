"""Regular expressions from configuration or data, run over text from outside, with a time limit.

Python's ``re`` has no timeout and backtracks: ``(a+)+$`` against forty ``a`` and a ``!``
runs for hours, and a model's answer (or an eval case's, or an MCP server's tool arguments)
chooses that text. So a pattern a user wrote (an eval's ``regex`` assertion, a ``pattern`` in
a JSON Schema) is matched with the ``regex`` module, whose search stops after
:data:`MATCH_SECONDS` and raises :class:`PatternTooSlow`; ``regex`` reads ``re``'s syntax.

:func:`bounded_validator` gives a jsonschema validator class whose ``pattern``,
``patternProperties`` and ``additionalProperties`` use it; a pattern that takes too long
makes a validation error, not a hang. ``unevaluatedProperties`` (which asks which keys the
``patternProperties`` of every applicable subschema match) uses it too, and checks the
validation's shared deadline, since nested applicators can make it re-validate exponentially.

A JSON Schema ``pattern`` is an ECMA-262 regular expression, whose ``$`` matches only at the end
of the text; Python's also matches before a final newline, so ``^[a-z]+$`` would accept
``"name\\n"`` here and not in an editor. :func:`ecma_ends` rewrites ``$`` as ``\\Z`` for every
schema keyword (here and in :mod:`runner.config.schema`); an eval's ``regex`` keeps Python's meaning.

Compiling is bounded as well: ``regex`` unrolls a fixed repeat (``a{4294967294}``,
``(?:a{1000}){1000}``) when it compiles, which takes gigabytes, so a pattern whose unrolled size
passes :data:`MAX_UNROLLED` is refused before ``regex`` sees it (``re`` parses it first; its
parser does not unroll).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from functools import cache, lru_cache
from typing import Any

MATCH_SECONDS = 1.0
MAX_UNROLLED = 20_000
"""The largest pattern ``regex`` may unroll (items times fixed repeat counts): about 3 MiB to
compile; ``(?:(ab|cd){300}){300}`` (540,000) takes 150 MiB, ``a{4294967294}`` all memory."""


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

    try:
        re.compile(pattern)
    except (re.error, ValueError, OverflowError, RecursionError) as exc:
        return str(exc)
    if (too_large := _unrolled_problem(pattern)) is not None:
        return too_large
    try:
        regex.compile(pattern, cache_pattern=False)  # regex's own cache keeps 500: a dataset of patterns would fill memory
    except (regex.error, ValueError, OverflowError, RecursionError) as exc:
        return str(exc)
    return None


def _unrolled_problem(pattern: str) -> str | None:
    """Why ``regex`` must not compile ``pattern`` (it would unroll it past :data:`MAX_UNROLLED`), or ``None``."""
    from re import _parser  # type: ignore[attr-defined]  # re's own parser: it keeps repeats as counts

    try:
        size = _unrolled_size(_parser.parse(pattern).data)
    except (_parser.error, ValueError, OverflowError, RecursionError) as exc:
        return str(exc)
    if size <= MAX_UNROLLED:
        return None
    return (
        f"the regular expression {_shown(pattern)} repeats too much: written out it has about {size:,} items "
        f"(at most {MAX_UNROLLED:,}); use a smaller count, or + and * instead of a large {{n}}"
    )


def _unrolled_size(items: Any) -> int:
    """Items of a parsed pattern, each repeat counted as its body times its least count (what
    ``regex`` writes out); capped so that nesting cannot overflow into a slow big integer."""
    from re import _constants  # type: ignore[attr-defined]

    repeats = {_constants.MAX_REPEAT, _constants.MIN_REPEAT, getattr(_constants, "POSSESSIVE_REPEAT", None)}
    size = 0
    for op, arg in items:
        if op in repeats:
            low, _high, body = arg
            size += max(int(low), 1) * _unrolled_size(body)
        elif op is _constants.SUBPATTERN:
            size += 1 + _unrolled_size(arg[-1])
        elif op is _constants.BRANCH:
            size += 1 + sum(_unrolled_size(branch) for branch in arg[1])
        elif op in (_constants.ASSERT, _constants.ASSERT_NOT):
            size += 1 + _unrolled_size(arg[1])
        elif op is getattr(_constants, "ATOMIC_GROUP", None):
            size += 1 + _unrolled_size(arg)
        elif op is _constants.GROUPREF_EXISTS:
            size += 1 + sum(_unrolled_size(branch) for branch in arg[1:] if branch is not None)
        else:
            size += 1
        if size > MAX_UNROLLED:
            return size
    return size


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


def ecma_ends(pattern: str) -> str:
    """``pattern`` with each ``$`` outside a character class written ``\\Z``: the end of the
    text only, as ECMA-262 (JSON Schema) reads ``$`` without the multiline flag."""
    out: list[str] = []
    class_body: str | None = None  # inside [...]: what follows the [ so far
    escaped = False
    for char in pattern:
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif class_body is None and char == "[":
            class_body = ""
            out.append(char)
            continue
        elif class_body is not None and char == "]" and class_body not in ("", "^"):  # []...] and [^]...]: a literal ]
            class_body = None
        elif class_body is None and char == "$":
            char = "\\Z"
        if class_body is not None:
            class_body += char
        out.append(char)
    return "".join(out)


def search(pattern: str, text: str, *, ignore_case: bool = False) -> bool:
    """Whether ``pattern`` matches somewhere in ``text``; :class:`PatternTooSlow` after
    :data:`MATCH_SECONDS` (or once a :func:`shared_deadline` has passed), ``ValueError`` for
    a pattern that does not compile."""
    compiled = _compiled(pattern, ignore_case)
    deadline = _DEADLINE.get()
    limit = MATCH_SECONDS if deadline is None else min(MATCH_SECONDS, deadline - time.monotonic())
    if limit <= 0:
        raise PatternTooSlow(pattern)
    try:
        return compiled.search(text, timeout=limit) is not None
    except TimeoutError:
        raise PatternTooSlow(pattern) from None


@lru_cache(maxsize=32)
def _compiled(pattern: str, ignore_case: bool) -> Any:
    """``pattern`` compiled by ``regex`` once checked (:func:`compile_problem`); ``ValueError`` if it may not be."""
    import regex

    problem = compile_problem(pattern)
    if problem is not None:
        raise ValueError(problem if problem.startswith("the regular expression") else f"invalid regular expression {_shown(pattern)}: {problem}")
    return regex.compile(pattern, regex.IGNORECASE if ignore_case else 0, cache_pattern=False)


@cache
def bounded_validator(base: Any) -> Any:
    """``base`` (a jsonschema validator class) with its pattern keywords matched by :func:`search`."""
    from jsonschema import validators

    keywords = {"pattern": _pattern, "patternProperties": _pattern_properties, "additionalProperties": _additional_properties}
    if "unevaluatedProperties" in base.VALIDATORS:  # Draft 2019-09 and later
        keywords["unevaluatedProperties"] = _unevaluated_properties
    return validators.extend(base, keywords)


def _matches(pattern: str, text: str) -> tuple[bool, str | None]:
    """``(matched, problem)``: a slow or invalid pattern is a problem, not an exception."""
    try:
        return search(ecma_ends(pattern), text), None
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


class _Stopped(Exception):
    """A pattern problem (slow, invalid) or the passed deadline, met while finding evaluated keys."""


def _unevaluated_properties(validator: Any, unevaluated: Any, instance: Any, schema: Any) -> Iterator[Any]:
    """jsonschema's ``unevaluatedProperties``, with patterns matched by :func:`search` and the
    shared deadline checked at each subschema (nested applicators re-validate exponentially)."""
    from jsonschema.exceptions import ValidationError

    if not validator.is_type(instance, "object"):
        return
    try:
        evaluated = set(_evaluated_keys(validator, instance, schema))
    except _Stopped as stopped:
        yield ValidationError(str(stopped))
        return
    rejected = [key for key in instance if key not in evaluated
                and next(validator.descend(instance[key], unevaluated, path=key, schema_path=key), None) is not None]  # fmt: skip
    if not rejected:
        return
    listed = ", ".join(repr(each) for each in sorted(rejected, key=str))
    verb = "was" if len(rejected) == 1 else "were"
    if unevaluated is False:
        yield ValidationError(f"Unevaluated properties are not allowed ({listed} {verb} unexpected)")
    else:
        yield ValidationError(f"Unevaluated properties are not valid under the given schema ({listed} {verb} unevaluated and invalid)")


def _evaluated_keys(validator: Any, instance: dict[str, Any], schema: Any) -> list[str]:
    """The keys of ``instance`` some keyword of ``schema`` evaluates (jsonschema's
    ``find_evaluated_property_keys_by_schema``, whose ``re.search`` has no time limit)."""
    deadline = _DEADLINE.get()
    if deadline is not None and time.monotonic() > deadline:
        raise _Stopped(f"validating this value against the schema took more than the {2 * MATCH_SECONDS:g} s allowed; "
                       "simplify the schema (fewer nested allOf/anyOf/oneOf with unevaluatedProperties)")
    if validator.is_type(schema, "boolean"):
        return []
    keys: list[str] = []
    for keyword in ("$ref", "$dynamicRef"):
        if (ref := schema.get(keyword)) is not None:
            resolved = validator._resolver.lookup(ref)  # as jsonschema does: the referenced schema's own scope
            inner = validator.evolve(schema=resolved.contents, _resolver=resolved.resolver)
            keys += _evaluated_keys(inner, instance, resolved.contents)
    properties = schema.get("properties")
    if validator.is_type(properties, "object"):
        keys += [key for key in instance if key in properties]
    for keyword in ("additionalProperties", "unevaluatedProperties"):
        if (subschema := schema.get(keyword)) is not None:
            keys += [key for key, value in instance.items() if _valid(validator.descend(value, subschema))]
    for pattern in schema.get("patternProperties", {}):
        for key in instance:
            matched, problem = _matches(pattern, key)
            if problem is not None:
                raise _Stopped(problem)
            if matched:
                keys.append(key)
    for name, subschema in schema.get("dependentSchemas", {}).items():
        if name in instance:
            keys += _evaluated_keys(validator, instance, subschema)
    for keyword in ("allOf", "oneOf", "anyOf"):
        for subschema in schema.get(keyword, []):
            if _valid(validator.descend(instance, subschema)):
                keys += _evaluated_keys(validator, instance, subschema)
    if "if" in schema:
        if validator.evolve(schema=schema["if"]).is_valid(instance):
            keys += _evaluated_keys(validator, instance, schema["if"])
            if "then" in schema:
                keys += _evaluated_keys(validator, instance, schema["then"])
        elif "else" in schema:
            keys += _evaluated_keys(validator, instance, schema["else"])
    return keys


def _valid(errors: Iterator[Any]) -> bool:
    return next(errors, None) is None


def _shown(text: str, limit: int = 60) -> str:
    return repr(text if len(text) <= limit else text[: limit - 1] + "…")
