"""Records what a run does: into the run store, and as events for the CLI or a log.

Every value passes through :func:`redact` first, so an API key that reached a message by
accident never reaches the store, the event stream or a report.
"""

from __future__ import annotations

import dataclasses
import json
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from runner.agent.loop import ModelCallRecord, ToolCallRecord
from runner.runs.types import EventSink
from runner.store.runstore import RunStore, now_iso

REDACTED = "[REDACTED]"


def redact(value: Any, secrets: Sequence[str]) -> Any:
    """``value`` with every secret string replaced, recursively."""
    secrets = [s for s in secrets if s and len(s) >= 6]
    if not secrets:
        return value
    if not isinstance(value, str):
        text = json.dumps(value, default=str, ensure_ascii=False)
        if not any(secret in text for secret in secrets):
            return value  # the common case: one serialisation instead of a walk
    return _redact(value, secrets)


def _redact(value: Any, secrets: Sequence[str]) -> Any:
    if isinstance(value, str):
        for secret in secrets:
            value = value.replace(secret, REDACTED)
        return value
    if isinstance(value, dict):
        return {k: _redact(v, secrets) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_redact(v, secrets) for v in value]
    return value


class RunRecorder:
    """The loop's :class:`~runner.agent.loop.Recorder` for one run attempt."""

    def __init__(self, store: RunStore, run_id: str, attempt: int, sink: EventSink | None, secrets: Sequence[str]):
        self.store, self.run_id, self.attempt = store, run_id, attempt
        self.sink, self.secrets = sink, tuple(s for s in secrets if s)
        self.tool_calls_by_step: dict[str, list[dict[str, Any]]] = defaultdict(list)
        self.models_by_step: dict[str, str] = {}

    def emit(self, event: str, **fields: Any) -> None:
        if self.sink is not None:
            self.sink(redact({"event": event, "run_id": self.run_id, "at": now_iso(), **fields}, self.secrets))

    def model_call(self, call: ModelCallRecord) -> None:
        data = redact(dataclasses.asdict(call), self.secrets)
        self.models_by_step[call.step_id] = call.model
        self.store.add_model_call(self.run_id, self.attempt, data)
        content = (data.pop("content") or "")[:300]
        self.emit("model_call", **data, content_excerpt=content)

    def tool_call(self, call: ToolCallRecord) -> None:
        data = redact(dataclasses.asdict(call), self.secrets)
        data["artifacts"] = list(data["artifacts"])
        self.store.add_tool_call(self.run_id, self.attempt, data)
        self.tool_calls_by_step[call.step_id].append(data)
        self.emit("tool_call", **data)
