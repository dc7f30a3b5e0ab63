"""A duration read from an environment variable: one parser and one message for every
``RUNNER_*_SECONDS`` knob, so a bad value is refused the same way wherever it is read."""

from __future__ import annotations

import math
import os

from runner.errors import UsageError


def env_seconds(name: str, default: float, maximum: float, *, example: float, zero: bool = False) -> float:
    """``$name`` as a number of seconds (``default`` when unset or blank); :class:`UsageError`
    naming the variable for a value that is not a number above 0 (or ``zero``: at least 0) and
    at most ``maximum``. NaN and infinities are refused too."""
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not ((seconds >= 0 if zero else seconds > 0) and seconds <= maximum):  # NaN fails both
        raise UsageError(
            f"{name}={text[:40]!r} is not a number of seconds between 0 and {maximum:g}; "
            f"write e.g. {name}={example:g}, or unset it for the default ({default:g})"
        )
    return seconds
