"""The one place a command's ``--json`` output (and every other JSON it prints) is made: always
valid JSON. A non-finite number (NaN, an infinity: a damaged or hand-edited store, a tool's
pandas data) cannot be written as JSON, so it becomes ``null`` and a warning on stderr names
where it was; the text is then made with ``allow_nan=False``, so ``Infinity`` can never reach
stdout. Control and bidi characters are written as ``\\uXXXX`` escapes (same value).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

import click

from runner.cli.terminal import echo_line, json_for_terminal


def json_text(value: Any, *, indent: int | None = 2, warn: bool = True) -> str:
    """``value`` as JSON text, non-finite numbers as ``null`` (with a warning on stderr when ``warn``)."""
    places: list[str] = []
    finite = _finite(value, "", places)
    if places and warn:
        shown = ", ".join(p or "/" for p in places[:5]) + (f" and {len(places) - 5} more" if len(places) > 5 else "")
        echo_line(f"warning: {len(places)} value(s) were not finite numbers and are shown as null: {shown}", err=True)
    return json_for_terminal(json.dumps(finite, indent=indent, ensure_ascii=False, allow_nan=False, default=str))


def echo_json(value: Any, *, indent: int | None = 2) -> None:
    """Print ``value`` as JSON on stdout (see :func:`json_text`)."""
    click.echo(json_text(value, indent=indent))


def _finite(value: Any, path: str, places: list[str]) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        places.append(path)
        return None
    if isinstance(value, Mapping):
        return {key: _finite(item, f"{path}/{key}", places) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(item, f"{path}/{index}", places) for index, item in enumerate(value)]
    return value
