"""Stuck detection: the same call repeated, or tool results that stop changing."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import dataclass, field

from runner import untrusted_json


def _canonical(arguments: str) -> str:
    try:
        return json.dumps(untrusted_json.loads(arguments), sort_keys=True, separators=(",", ":"))
    except (ValueError, TypeError):
        return arguments.strip()


@dataclass
class StuckDetector:
    """Counts identical tool calls and consecutive identical results.

    ``max_repeats``: the same (tool, arguments) seen this many times means stuck.
    ``max_invalid``: this many malformed or unknown tool calls in a row means stuck.
    """

    max_repeats: int = 3
    max_invalid: int = 3
    _calls: Counter[str] = field(default_factory=Counter)
    _invalid_streak: int = 0
    _same_result_streak: int = 0
    _last_result: str = ""
    reason: str | None = None

    def observe_call(self, name: str, arguments: str) -> None:
        key = f"{name}:{_canonical(arguments)}"
        self._calls[key] += 1
        if self._calls[key] >= self.max_repeats and self.reason is None:
            self.reason = f"called {name} with the same arguments {self._calls[key]} times"

    def observe_result(self, content: str, *, valid: bool) -> None:
        self._invalid_streak = 0 if valid else self._invalid_streak + 1
        if self._invalid_streak >= self.max_invalid and self.reason is None:
            self.reason = f"{self._invalid_streak} invalid tool calls in a row"
        digest = hashlib.sha256(content.encode()).hexdigest()
        self._same_result_streak = self._same_result_streak + 1 if digest == self._last_result else 1
        self._last_result = digest
        if self._same_result_streak > self.max_repeats and self.reason is None:
            self.reason = f"the last {self._same_result_streak} tool results were identical (no progress)"

    @property
    def stuck(self) -> bool:
        return self.reason is not None
