"""The result cache, opt-in (``cache: {ttl: ...}`` on an agent or a task): a deterministic
model call, or a call of an idempotent built-in tool, made again with the same request is
answered from the run store instead of the endpoint or the tool.

What is cacheable is decided here, on the request:

- a model call only at ``temperature: 0`` (an unset temperature is the endpoint's default,
  which samples); the key hashes the model, the messages, the tools, ``tool_choice`` and
  ``max_tokens``: everything the endpoint's answer depends on;
- a tool call only of the built-ins in :data:`IDEMPOTENT_TOOLS` (never ``python``, ``shell``,
  ``write_file`` or ``browse``: they act, or see a changing workspace); the key hashes the
  tool, its settings and its arguments. A result with artifacts is never stored (the files
  would not be there on a re-run).

A hit costs nothing, so it reserves nothing; it is recorded like any other call, marked
``cached``. Values are redacted with the run's secrets before they are stored.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from runner.core.sources import Source
from runner.errors import ToolFailure
from runner.model.base import ModelRequest, ModelResponse, ToolCall
from runner.redact import redact_secrets
from runner.store.result_cache import ResultStore
from runner.tools.base import ToolResult
from runner.untrusted_json import loads as load_json

IDEMPOTENT_TOOLS = frozenset({"calculator", "fetch_url", "web_search"})
"""Built-ins whose result depends only on their arguments and settings (within a TTL)."""
KEY_VERSION = "runner-result-cache/1"  # part of every key: a new request shape starts a new cache


class CallAnswers(Protocol):
    """What the loop asks before a model or tool call: an answer it may use instead, at no
    cost (the result cache; :class:`~runner.agent.replay.ReplayCache` for a provider batch's
    stored lines)."""

    def model_response(self, request: ModelRequest) -> ModelResponse | None: ...

    def keep_response(self, request: ModelRequest, response: ModelResponse) -> None: ...

    def tool_result(self, name: str, settings: dict[str, Any], arguments: str) -> ToolResult | None: ...

    def keep_tool_result(self, name: str, settings: dict[str, Any], arguments: str, result: ToolResult) -> None: ...

    def keep_tool_failure(self, name: str, settings: dict[str, Any], arguments: str, failure: ToolFailure) -> None: ...


@dataclass(frozen=True)
class CallCache:
    """The result cache of one run: where entries live, how long they last, and the secrets
    redacted from what is stored."""

    store: ResultStore
    ttl_seconds: float
    secrets: Sequence[str] = ()

    # --- model calls ---------------------------------------------------------------

    def model_response(self, request: ModelRequest) -> ModelResponse | None:
        """The stored answer to ``request``, if it is cacheable and stored (and not expired)."""
        key = model_key(request)
        value = self.store.get(key) if key is not None else None
        if not isinstance(value, dict):
            return None
        calls = tuple(ToolCall(str(c["id"]), str(c["name"]), str(c["arguments"])) for c in value.get("tool_calls", ()))
        return ModelResponse(
            value.get("content"), calls, model=str(value.get("model", "")), finish_reason=value.get("finish_reason")
        )

    def keep_response(self, request: ModelRequest, response: ModelResponse) -> None:
        """Store ``response`` as the answer to ``request`` (when the request is cacheable)."""
        key = model_key(request)
        if key is None:
            return
        value = {
            "content": response.content,
            "model": response.model,
            "finish_reason": response.finish_reason,
            "tool_calls": [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in response.tool_calls],
        }
        self.store.put(key, "model", redact_secrets(value, self.secrets), self.ttl_seconds)

    # --- tool calls ----------------------------------------------------------------

    def tool_result(self, name: str, settings: dict[str, Any], arguments: str) -> ToolResult | None:
        """The stored result of an idempotent tool call, if any."""
        key = tool_key(name, settings, arguments)
        value = self.store.get(key) if key is not None else None
        if not isinstance(value, dict):
            return None
        sources = tuple(Source.from_dict(s) for s in value.get("sources", ()))
        return ToolResult(str(value.get("content", "")), data=value.get("data"), sources=sources)

    def keep_tool_result(self, name: str, settings: dict[str, Any], arguments: str, result: ToolResult) -> None:
        """Store an idempotent tool's result (never one that wrote files)."""
        key = tool_key(name, settings, arguments)
        if key is None or result.artifacts:
            return
        value = {"content": result.content, "data": result.data, "sources": [s.as_dict() for s in result.sources]}
        self.store.put(key, "tool", redact_secrets(value, self.secrets), self.ttl_seconds)

    def keep_tool_failure(self, name: str, settings: dict[str, Any], arguments: str, failure: ToolFailure) -> None:
        """Failures are not cached (a later call may succeed)."""


def model_key(request: ModelRequest) -> str | None:
    """The hash of ``request``'s canonical form, or ``None`` when its answer is not
    deterministic (a temperature other than an explicit 0)."""
    if request.temperature is None or request.temperature != 0:
        return None
    canonical = {
        "model": request.model,
        "messages": [m.to_openai() | ({"name": m.name} if m.name else {}) for m in request.messages],
        "tools": list(request.tools),
        "tool_choice": request.tool_choice if request.tools else "none",
        "max_tokens": request.max_tokens,
        "temperature": 0,
    }
    return _digest("model", canonical)


def tool_key(name: str, settings: dict[str, Any], arguments: str) -> str | None:
    """The hash of an idempotent tool call (``None`` for any other tool). Arguments that are
    JSON are compared as values, so key order and spacing do not matter."""
    if name not in IDEMPOTENT_TOOLS:
        return None
    try:
        parsed: Any = load_json(arguments)
    except ValueError:
        parsed = {"raw": arguments}
    return _digest("tool", {"name": name, "settings": settings, "arguments": parsed})


def _digest(kind: str, canonical: dict[str, Any]) -> str:
    text = json.dumps(canonical, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return f"{kind}:" + hashlib.sha256(f"{KEY_VERSION}\0{text}".encode()).hexdigest()
