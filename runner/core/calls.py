"""Entries the agent loop writes for each model call and tool call (the run's transcript)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from runner.core.usage import Usage

CallStatus = Literal["ok", "error"]
ModelCallStatus = Literal["reserved", "ok", "error", "unsettled"]
"""``reserved``: written before the call is sent, with its worst case; ``ok`` / ``error``: settled
with what it used; ``unsettled``: still reserved when its attempt ended (a crash), so counted at
its worst case."""


@dataclass(frozen=True)
class Exchange:
    """What one model call sent and got back, in OpenAI Chat Completions shapes: the request's
    ``messages`` and ``tools`` (function schemas), its ``settings`` (model, tool choice, token
    limit, temperature) and the ``response`` (content, tool calls, finish reason; ``None`` when
    the attempt failed). The run store keeps it as the call's transcript."""

    messages: tuple[dict[str, Any], ...]
    tools: tuple[dict[str, Any], ...] = ()
    settings: dict[str, Any] = field(default_factory=dict)
    response: dict[str, Any] | None = None


@dataclass(frozen=True)
class ModelCallEntry:
    """One model call (one attempt, when the endpoint was retried): what it used
    (``usage.cost_usd`` priced, the worst case while ``reserved``) and how it ended."""

    step_id: str
    agent: str
    model: str
    seq: int
    usage: Usage
    latency_seconds: float
    status: ModelCallStatus
    error: str | None = None
    tool_calls: int = 0
    content: str | None = None
    finish_reason: str | None = None  # as the endpoint reported it (``stop``, ``length``, ``tool_calls``, ...)
    error_kind: str | None = None  # the ModelError kind of a failed attempt (``timeout``, ``rate_limited``, ...)
    cached: bool = False  # answered from the result cache (runner.agent.call_cache): no endpoint call, $0
    exchange: Exchange | None = field(default=None, compare=False, repr=False)  # the full request and response
    reservation: str | None = None  # the budget reservation the attempt held (a shared cap ledger's entry id)
    tariff: str = "live"  # how the attempt is sent: ``live``, or ``batch`` (in a provider batch: runner batch --via batch-api)


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
    cached: bool = False  # answered from the result cache (runner.agent.call_cache): the tool did not run
    output: str | None = field(default=None, compare=False, repr=False)  # the whole output, for the transcript
