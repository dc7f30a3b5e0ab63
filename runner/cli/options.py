"""Flags shared by ``run`` and ``batch``: caps and inputs."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import click

from runner.config.specs import CAP_NAMES, Caps
from runner.errors import UsageError

CAP_FLAGS = (
    ("max_steps", int, "Model calls at most."),
    ("max_tool_calls", int, "Tool calls at most."),
    ("max_input_tokens", int, "Prompt tokens at most."),
    ("max_output_tokens", int, "Completion tokens at most."),
    ("max_tokens", int, "Prompt + completion tokens at most."),
    ("max_cost_usd", float, "US dollars at most."),
    ("max_wall_seconds", float, "Wall-clock seconds at most."),
)


def caps_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Add ``--max-steps`` ... ``--max-wall-seconds``; they only tighten the YAML's caps."""
    for name, kind, help_ in reversed(CAP_FLAGS):
        flag = "--" + name.replace("_", "-")
        command = click.option(flag, name, type=click.IntRange(min=0) if kind is int else click.FloatRange(min=0), help=help_ + " Tightens the YAML caps for this run.")(command)
    return command


def caps_from_flags(values: dict[str, Any]) -> Caps:
    """The caps given on the command line (others in ``values`` are ignored); NaN and infinity are refused."""
    chosen = {k: v for k, v in values.items() if v is not None and k in CAP_NAMES}
    for name, value in chosen.items():
        if isinstance(value, float) and not math.isfinite(value):
            raise UsageError(f"--{name.replace('_', '-')} must be a finite number")
    return Caps(**chosen)


def parse_inputs(pairs: tuple[str, ...]) -> dict[str, str]:
    """``NAME=VALUE`` pairs; values stay strings until coerced to the declared types."""
    values: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise UsageError(f"--input {pair!r}: write NAME=VALUE")
        if name in values:
            raise UsageError(f"--input {name} given twice")
        values[name.strip()] = value
    return values
