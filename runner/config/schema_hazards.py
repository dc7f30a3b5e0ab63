"""What makes a user's JSON Schema valid by the metaschema yet unusable at run time.

The metaschema checks that a ``pattern`` is a regular expression (Python's ``re`` compiles it),
not that ``regex``, which runs user patterns with a time limit, can compile it in bounded
memory (:func:`runner.untrusted_regex.compile_problem`); and it accepts a ``$ref`` that leads
back to itself without descending into the value, which recurses until Python gives up.
Both are found when the configuration is validated, so ``runner validate`` names them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from runner.untrusted_regex import bounded_validator, compile_problem, shared_deadline

_VALUES = frozenset({"const", "enum", "default", "examples"})
"""Keywords whose content is data, not schema: a key named ``pattern`` there is not one."""
_PROBES: tuple[Any, ...] = (None, {}, [], "", 0)
"""Values a self-referencing ``$ref`` recurses on (a cycle that consumes nothing recurses on every value)."""


def pattern_problem(schema: Any) -> str | None:
    """The first ``pattern`` or ``patternProperties`` key of ``schema`` that cannot be run, and why."""
    for pattern in _patterns(schema):
        if (reason := compile_problem(pattern)) is not None:
            return f"pattern {pattern[:60]!r}: {reason}"
    return None


def typed_values_problem(schema: Any, pointer: str = "") -> str | None:
    """The first ``enum`` or ``const`` value of ``schema`` that its own ``type`` refuses (such a
    value can never be given: ``{type: string, enum: [1, 2]}``), and where."""
    if isinstance(schema, list):
        return next((p for i, s in enumerate(schema) if (p := typed_values_problem(s, f"{pointer}/{i}"))), None)
    if not isinstance(schema, dict):
        return None
    declared = schema.get("type")
    types = [declared] if isinstance(declared, str) else declared if isinstance(declared, list) else None
    if types is not None:
        values = [*(schema["enum"] if isinstance(schema.get("enum"), list) else ()), *([schema["const"]] if "const" in schema else [])]
        for value in values:
            if not any(_is_json_type(value, kind) for kind in types):
                return (f"{pointer or '/'}: {value!r} is not of the declared type {declared!r}, so it can never be given; "
                        f"write it as {'/'.join(map(str, types))} (YAML 1.2: yes is a string, 1 a number)")  # fmt: skip
    for key, value in schema.items():
        if key not in ("enum", "const", "default", "examples") and (found := typed_values_problem(value, f"{pointer}/{key}")):
            return found
    return None


def _is_json_type(value: Any, kind: str) -> bool:
    if kind == "integer":
        return (isinstance(value, int) and not isinstance(value, bool)) or (isinstance(value, float) and value.is_integer())
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    expected = {"string": str, "boolean": bool, "null": type(None), "object": dict, "array": list}.get(kind)
    return expected is None or isinstance(value, expected)


def recursion_problem(schema: Any) -> str | None:
    """Why validating against ``schema`` would never end (a ``$ref`` cycle), or ``None``."""
    from jsonschema import Draft202012Validator
    from referencing import Registry
    from referencing.exceptions import Unresolvable

    checker = bounded_validator(Draft202012Validator)(schema, registry=Registry())  # nothing fetched, patterns bounded
    for value in _PROBES:
        try:
            with shared_deadline():
                next(checker.iter_errors(value), None)
        except RecursionError:
            return ("its references form a cycle that never reaches a value ($ref leads back to itself); "
                    "make each recursive $ref sit under properties or items")  # fmt: skip
        except Unresolvable:
            return None  # reported by the reference check
    return None


def _patterns(node: Any) -> Iterator[str]:
    if isinstance(node, list):
        for item in node:
            yield from _patterns(item)
        return
    if not isinstance(node, dict):
        return
    if isinstance(node.get("pattern"), str):
        yield node["pattern"]
    if isinstance(node.get("patternProperties"), dict):
        yield from (key for key in node["patternProperties"] if isinstance(key, str))
    for key, value in node.items():
        if key not in _VALUES:
            yield from _patterns(value)
