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
