"""The step record: how one step of a run ended. One type from the loop to the store, the
report and a resumed run; :meth:`StepRecord.as_dict` and :meth:`StepRecord.from_dict` are
the only (de)serialisation (``report.schema.json#/$defs/step``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from runner import untrusted_json
from runner.core.calls import CallStatus
from runner.core.degradation import Degradation
from runner.core.sources import Source
from runner.core.status import Status
from runner.core.usage import Usage

StepKind = Literal["agent", "tool", "planner", "synthesis"]


@dataclass(frozen=True)
class ToolCallSummary:
    """What a step record keeps of one tool call (arguments parsed when they were JSON)."""

    name: str
    status: CallStatus
    arguments: dict[str, Any] = field(default_factory=dict)
    duration_seconds: float = 0.0
    output_excerpt: str | None = None

    @classmethod
    def parsed(cls, name: str, status: CallStatus, raw_arguments: str, duration: float, excerpt: str) -> ToolCallSummary:
        try:
            arguments = untrusted_json.loads(raw_arguments)
        except ValueError:
            arguments = {"raw": raw_arguments}
        if not isinstance(arguments, dict):
            arguments = {"raw": raw_arguments}
        return cls(name, status, arguments, duration, excerpt)

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "status": self.status, "arguments": self.arguments,
            "duration_seconds": self.duration_seconds, "output_excerpt": self.output_excerpt,
        }


@dataclass(frozen=True)
class StepRecord:
    """One step: agent, tool, planner or synthesis. ``error_scope`` names the budget scope
    whose cap stopped it (``batch``, ``task``, ``step 'x'``), when a cap did; ``error_budget``
    the budget over time (``kind: Budget``) whose window that scope is, when it is one."""

    id: str
    kind: StepKind
    status: Status = "running"
    agent: str | None = None
    tool: str | None = None
    output: Any = None
    data: Any = None
    error: str | None = None
    error_kind: str | None = None
    error_scope: str | None = None
    error_budget: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    duration_seconds: float = 0.0
    usage: Usage = field(default_factory=Usage)
    model: str | None = None
    tool_calls: tuple[ToolCallSummary, ...] = ()
    artifacts: tuple[str, ...] = ()
    resumed: bool = False
    warnings: tuple[str, ...] = ()  # e.g. an endpoint that reported more than was reserved
    sources: tuple[Source, ...] = ()  # what the step's tools found that an answer may cite
    cached_calls: int = 0  # model and tool calls answered from the result cache (runner.agent.call_cache)
    degraded: tuple[Degradation, ...] = ()  # calls sent to a fallback model, a budget being past its threshold

    @property
    def completed(self) -> bool:
        return self.status == "completed"

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id, "kind": self.kind, "agent": self.agent, "tool": self.tool, "status": self.status,
            "output": self.output, "data": self.data, "error": self.error, "error_kind": self.error_kind,
            "error_scope": self.error_scope, "error_budget": self.error_budget, "started_at": self.started_at, "finished_at": self.finished_at,
            "duration_seconds": self.duration_seconds, "usage": self.usage.as_dict(), "model": self.model,
            "tool_calls": [call.as_dict() for call in self.tool_calls], "artifacts": list(self.artifacts),
            "resumed": self.resumed, "warnings": list(self.warnings), "sources": [s.as_dict() for s in self.sources],
            "cached_calls": self.cached_calls, "degraded": [d.as_dict() for d in self.degraded],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StepRecord:
        calls = tuple(
            ToolCallSummary(c["name"], c["status"], c.get("arguments") or {}, c.get("duration_seconds") or 0.0, c.get("output_excerpt"))
            for c in data.get("tool_calls") or ()
        )
        return cls(
            id=data["id"], kind=data["kind"], status=data["status"], agent=data.get("agent"), tool=data.get("tool"),
            output=data.get("output"), data=data.get("data"), error=data.get("error"),
            error_kind=data.get("error_kind"), error_scope=data.get("error_scope"), error_budget=data.get("error_budget"),
            started_at=data.get("started_at"), finished_at=data.get("finished_at"),
            duration_seconds=data.get("duration_seconds") or 0.0, usage=Usage.from_dict(data.get("usage")),
            model=data.get("model"), tool_calls=calls, artifacts=tuple(data.get("artifacts") or ()),
            resumed=bool(data.get("resumed")), warnings=tuple(data.get("warnings") or ()),
            sources=tuple(Source.from_dict(s) for s in data.get("sources") or ()),
            cached_calls=int(data.get("cached_calls") or 0),
            degraded=tuple(Degradation.from_dict(d) for d in data.get("degraded") or ()),
        )
