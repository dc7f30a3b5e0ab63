"""A run's progress in the Airflow task log: the readable lines ``runner run`` prints (steps,
model calls with the cost so far, tool calls, the final summary), each one log record.

Event text comes from models and tools: control characters become visible escapes (a newline
in a model's answer cannot forge a log line), and the run's secrets (the API key, source
URLs) are redacted by the runner before Airflow's own masker sees the line.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from typing import Any

from runner.redact import redact
from runner.runs.progress import ProgressLines

_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


class TaskLogProgress(ProgressLines):
    """An event sink (``RunOptions.events``) writing each readable line to ``log`` at INFO."""

    def __init__(self, log: logging.Logger | Any, secrets: Iterable[str | None] = ()) -> None:
        super().__init__()
        self.log = log
        self.secrets = [s for s in secrets if s]

    def __call__(self, event: dict[str, Any]) -> None:
        line = self.line(_one_line(event))
        if line:
            for part in redact(line, self.secrets).splitlines():  # the summary's "reason:" is its own record
                self.log.info("%s", part)


def _one_line(value: Any) -> Any:
    if isinstance(value, str):
        return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else f"\\u{ord(m.group()):04x}", value)
    if isinstance(value, dict):
        return {key: _one_line(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_one_line(item) for item in value]
    return value
