"""Entries the agent loop writes for each model call and tool call (the run's transcript)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from runner.core.usage import Usage

CallStatus = Literal["ok", "error"]


@dataclass(frozen=True)
class ModelCallEntry:
    """One model call: what it used (``usage.cost_usd`` priced) and how it ended."""

    step_id: str
    agent: str
    model: str
    seq: int
    usage: Usage
    latency_seconds: float
    status: CallStatus
    error: str | None = None
    tool_calls: int = 0
    content: str | None = None


@dataclass(frozen=True)
class ToolCallEntry:
    """One tool call: its raw JSON arguments, how it ended and an excerpt of its output."""

    step_id: str
    agent: str
    seq: int
    name: str
    arguments: str
    status: CallStatus
    duration_seconds: float
    output_excerpt: str
    artifacts: tuple[str, ...] = ()
