"""Parsing JSON nobody vetted (model tool-call arguments and answers, batch rows, HTTP bodies).

``json.loads`` raises ``RecursionError``, not ``ValueError``, on deeply nested input (50,000
``[``), and a value a little less deep parses but then breaks whatever walks it next
(JSON Schema validation, redaction, ``json.dumps``). :func:`loads` turns both into
:class:`JsonTooDeep`, a ``ValueError``, so every caller's existing "not valid JSON"
handling covers it, and guarantees the result is at most :data:`MAX_JSON_DEPTH` deep.
"""

from __future__ import annotations

import json
from typing import Any

MAX_JSON_DEPTH = 64
"""Nested arrays/objects allowed in untrusted JSON (the YAML configuration has the same limit)."""


class JsonTooDeep(ValueError):
    """The JSON nests arrays or objects more than :data:`MAX_JSON_DEPTH` levels deep."""

    def __init__(self, limit: int = MAX_JSON_DEPTH):
        self.limit = limit
        super().__init__(f"nested more than {limit} levels deep (arrays/objects); send a flatter value")


def loads(text: str | bytes, *, max_depth: int = MAX_JSON_DEPTH, **options: Any) -> Any:
    """``json.loads(text, **options)``, refusing nesting deeper than ``max_depth``."""
    try:
        value = json.loads(text, **options)
    except RecursionError:
        raise JsonTooDeep(max_depth) from None
    check_depth(value, max_depth)
    return value


def check_depth(value: Any, max_depth: int = MAX_JSON_DEPTH) -> None:
    """Raise :class:`JsonTooDeep` if ``value`` nests lists/dicts deeper than ``max_depth``.

    Iterative, so it works on values far deeper than the recursion limit.
    """
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth >= max_depth:
                raise JsonTooDeep(max_depth)
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
