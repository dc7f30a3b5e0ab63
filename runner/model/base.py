"""The model interface: typed requests and responses, independent of any SDK.

Every provider (the openai SDK adapter, the embedded local model, the scripted test
model) implements :class:`ChatModel`. The agent loop only sees these types.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from runner.core.usage import Usage

__all__ = ["AttemptHook", "ChatModel", "Message", "ModelRequest", "ModelResponse", "Tariff", "ToolCall", "Usage"]

Tariff = Literal["live", "batch"]
"""How the provider bills a call: at its live price, or through its Batch API (about half;
``runner.config.prices.batch_price``)."""


@dataclass(frozen=True)
class ToolCall:
    """One tool call requested by the model. ``arguments`` is the raw JSON text."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class Message:
    """One chat message in OpenAI Chat Completions shape."""

    role: str  # system | user | assistant | tool
    content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    compacted: bool = False  # a tool result replaced by a short note (never sent on the wire)

    def to_openai(self) -> dict[str, Any]:
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            out["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in self.tool_calls
            ]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        return out


@dataclass(frozen=True)
class ModelRequest:
    """Everything one model call needs. ``tools`` are OpenAI function-tool dicts."""

    model: str
    messages: tuple[Message, ...]
    tools: tuple[dict[str, Any], ...] = ()
    tool_choice: str = "auto"  # auto | none | required
    max_tokens: int | None = None
    temperature: float | None = None
    prompt_cache_key: str | None = None  # sent as ``prompt_cache_key`` (see runner.model.prompt_cache)
    tokens_field: str = "max_tokens"  # the profile's: max_tokens | max_completion_tokens
    top_p: float | None = None
    seed: int | None = None
    stop: tuple[str, ...] = ()
    reasoning_effort: str | None = None
    service_tier: str | None = None
    response_format: dict[str, Any] | None = None  # a strict json_schema format (model.structured_output: auto)
    extra_body: Mapping[str, Any] = field(default_factory=dict)  # model.extra_body: fields runner does not set itself


@dataclass(frozen=True)
class ModelResponse:
    """The model's answer to one request."""

    content: str | None
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage = field(default_factory=Usage)
    model: str = ""
    finish_reason: str | None = None
    latency_seconds: float = 0.0
    tariff: Tariff = "live"  # a provider batch's answer is billed at the batch price
    service_tier: str | None = None  # the tier the answer says served it (OpenAI's service_tier, Anthropic's usage.service_tier)
    recorded: bool = True  # False: a stored answer no record holds yet (a provider batch's, its record lost): served, it is recorded


class AttemptHook(Protocol):
    """Told about each failed attempt a model is about to retry (so every attempt can be
    reserved against the caps first); raising stops the retries with that exception."""

    def retry(self, kind: str, message: str, tariff: Tariff | None = None) -> None:
        """Settle the failed attempt and reserve the next; ``tariff``: the next attempt is
        billed at another price (a provider batch's line retried live)."""

    @property
    def ledger_id(self) -> int | None:
        """The run store's record of the attempt in flight (written before it was sent)."""


class ChatModel(Protocol):
    """A chat model: one async call per request. Implementations raise ``ModelError``; one
    that retries calls ``attempts.retry`` before each retry."""

    name: str
    supports_tools: bool

    async def complete(self, request: ModelRequest, attempts: AttemptHook | None = None) -> ModelResponse: ...

    async def aclose(self) -> None: ...
