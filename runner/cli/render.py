"""Rendering run events for a person (one line each, with cost so far) or as JSON Lines.

Event text comes from models and tools: the readable log shows control characters as escapes
(:mod:`runner.cli.terminal`); JSON Lines keep every value exact.
"""

from __future__ import annotations

import sys
from typing import Any, TextIO

from runner.cli.json_output import json_text
from runner.cli.terminal import safe_line
from runner.runs.progress import ProgressLines


class JsonLines:
    """Each event as one JSON object per line on stdout (machine-readable)."""

    def __init__(self, stream: TextIO | None = None):
        self.stream = stream or sys.stdout

    def __call__(self, event: dict[str, Any]) -> None:
        self.stream.write(json_text(event, indent=None) + "\n")
        self.stream.flush()


class HumanLog(ProgressLines):
    """A readable account of what the agent does and what it has cost so far (stderr)."""

    def __init__(self, stream: TextIO | None = None):
        super().__init__()
        self.stream = stream or sys.stderr

    def __call__(self, event: dict[str, Any]) -> None:
        line = self.line(_one_line_values(event))
        if line:
            self.stream.write(line + "\n")
            self.stream.flush()


def _one_line_values(value: Any) -> Any:
    """The event with every text made safe for one terminal line (numbers and structure kept)."""
    if isinstance(value, str):
        return safe_line(value)
    if isinstance(value, dict):
        return {key: _one_line_values(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_one_line_values(item) for item in value]
    return value
