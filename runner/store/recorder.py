"""Records what a run does: into the run store, and as events for the CLI or a log.

Every value passes through :func:`~runner.redact.redact_secrets` first, so an API key that reached a message by
accident never reaches the store, the event stream or a report.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from runner.agent.loop import ModelCallRecord, ToolCallRecord
from runner.redact import redact_secrets
from runner.runs.types import EventSink
from runner.store.runstore import RunStore, now_iso


class RunRecorder:
    """The loop's :class:`~runner.agent.loop.Recorder` for one run attempt."""

    def __init__(self, store: RunStore, run_id: str, attempt: int, sink: EventSink | None, secrets: Sequence[str]):
        self.store, self.run_id, self.attempt = store, run_id, attempt
        self.sink, self.secrets = sink, tuple(s for s in secrets if s)
        self.tool_calls_by_step: dict[str, list[dict[str, Any]]] = defaultdict(list)
        self.models_by_step: dict[str, str] = {}

    def emit(self, event: str, **fields: Any) -> None:
        if self.sink is not None:
            self.sink(redact_secrets({"event": event, "run_id": self.run_id, "at": now_iso(), **fields}, self.secrets))

    def model_call(self, call: ModelCallRecord) -> None:
        data = redact_secrets(dataclasses.asdict(call), self.secrets)
        self.models_by_step[call.step_id] = call.model
        self.store.add_model_call(self.run_id, self.attempt, data)
        content = (data.pop("content") or "")[:300]
        self.emit("model_call", **data, content_excerpt=content)

    def tool_call(self, call: ToolCallRecord) -> None:
        data = redact_secrets(dataclasses.asdict(call), self.secrets)
        data["artifacts"] = list(data["artifacts"])
        self.store.add_tool_call(self.run_id, self.attempt, data)
        self.tool_calls_by_step[call.step_id].append(data)
        self.emit("tool_call", **data)
