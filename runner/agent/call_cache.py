"""The result cache, opt-in (``cache: {ttl: ...}`` on an agent or a task): a deterministic
model call, or a call of an idempotent built-in tool, made again with the same request is
answered from the run store instead of the endpoint or the tool.

What is cacheable is decided here, on the request:

- a model call only at ``temperature: 0`` (an unset temperature is the endpoint's default,
  which samples); the key hashes the model, the messages, the tools, ``tool_choice`` and
  ``max_tokens``, and the endpoint that answers (:func:`endpoint_identity`: provider, base
  URL and a fingerprint of the key, so the same model id at a staging server, or under
  another account's key, is another entry);
- a tool call only of the built-ins in :data:`IDEMPOTENT_TOOLS` (never ``python``, ``shell``,
  ``write_file`` or ``browse``: they act, or see a changing workspace); the key hashes the
  tool, its settings, its arguments and the caller's :func:`tool_scope` (the network policy
  the tool runs under and fingerprints of the keys its settings name): an agent never gets
  a page fetched under another agent's exemptions. A result with artifacts is never stored
  (the files would not be there on a re-run).

A hit costs nothing, so it reserves nothing; it is recorded like any other call, marked
``cached``. Values are redacted with the run's secrets before they are stored; a stored
value of another shape (another version, a hand edit) is a miss, never an error.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from runner.core.sources import Source
from runner.endpoints import DEFAULT_BASE_URL
from runner.errors import ToolFailure
from runner.model.base import ModelRequest, ModelResponse, ToolCall
from runner.redact import redact_secrets
from runner.store.result_cache import ResultStore
from runner.tools.base import ToolResult
from runner.untrusted_json import loads as load_json

if TYPE_CHECKING:
    from runner.model.endpoint import Endpoint
    from runner.tools.net import NetworkPolicy

IDEMPOTENT_TOOLS = frozenset({"calculator", "fetch_url", "web_search"})
"""Built-ins whose result depends only on their arguments and settings (within a TTL)."""
KEY_VERSION = "runner-result-cache/2"  # part of every key: a new request shape starts a new cache


class CallAnswers(Protocol):
    """What the loop asks before a model or tool call: an answer it may use instead, at no
    cost (the result cache; :class:`~runner.agent.replay.ReplayCache` for a provider batch's
    stored lines)."""

    def model_response(self, request: ModelRequest, endpoint: str) -> ModelResponse | None: ...

    def keep_response(self, request: ModelRequest, response: ModelResponse, endpoint: str) -> None: ...

    def tool_result(self, name: str, settings: dict[str, Any], arguments: str) -> ToolResult | None: ...

    def keep_tool_result(self, name: str, settings: dict[str, Any], arguments: str, result: ToolResult) -> None: ...

    def keep_tool_failure(self, name: str, settings: dict[str, Any], arguments: str, failure: ToolFailure) -> None: ...


@dataclass(frozen=True)
class CallCache:
    """The result cache of one agent's calls: where entries live, how long they last, the
    secrets redacted from what is stored, and ``tool_scope`` (:func:`tool_scope`), part of
    every tool key."""

    store: ResultStore
    ttl_seconds: float
    secrets: Sequence[str] = ()
    tool_scope: Mapping[str, Any] = field(default_factory=dict)

    # --- model calls ---------------------------------------------------------------

    def model_response(self, request: ModelRequest, endpoint: str) -> ModelResponse | None:
        """The stored answer to ``request`` at ``endpoint`` (:func:`endpoint_identity`), if it
        is cacheable, stored, not expired and of the shape this version writes."""
        key = model_key(request, endpoint)
        return _model_value(self.store.get(key)) if key is not None else None

    def keep_response(self, request: ModelRequest, response: ModelResponse, endpoint: str) -> None:
        """Store ``response`` as ``endpoint``'s answer to ``request`` (when the request is cacheable)."""
        key = model_key(request, endpoint)
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
        """The stored result of an idempotent tool call made under this cache's scope, if any."""
        key = tool_key(name, settings, arguments, self.tool_scope)
        return _tool_value(self.store.get(key)) if key is not None else None

    def keep_tool_result(self, name: str, settings: dict[str, Any], arguments: str, result: ToolResult) -> None:
        """Store an idempotent tool's result (never one that wrote files)."""
        key = tool_key(name, settings, arguments, self.tool_scope)
        if key is None or result.artifacts:
            return
        value = {"content": result.content, "data": result.data, "sources": [s.as_dict() for s in result.sources]}
        self.store.put(key, "tool", redact_secrets(value, self.secrets), self.ttl_seconds)

    def keep_tool_failure(self, name: str, settings: dict[str, Any], arguments: str, failure: ToolFailure) -> None:
        """Failures are not cached (a later call may succeed)."""


def endpoint_identity(endpoint: Endpoint) -> str:
    """Who answers an endpoint's calls, as part of a model key: the provider, the base URL
    (trailing slash aside; none is the standard one) and a fingerprint of the key (the account it bills and whose
    fine-tunes and aliases it sees). The key itself is never stored: only this goes into
    the hash of the key."""
    base_url = (endpoint.base_url or DEFAULT_BASE_URL).rstrip("/")
    return json.dumps([endpoint.provider, base_url, _fingerprint(endpoint.api_key)])


def tool_scope(network: NetworkPolicy | None, settings: Mapping[str, Mapping[str, Any]], environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """What an idempotent tool's result depends on besides its settings and arguments: the
    network policy it runs under (hosts, private networks it may reach, size and redirect
    limits) and a fingerprint of each key its settings name (``api_key_env``)."""
    env = os.environ if environ is None else environ
    keys = {
        name: _fingerprint(env.get(str(tool["api_key_env"])))
        for name, tool in sorted(settings.items())
        if isinstance(tool, Mapping) and tool.get("api_key_env")
    }
    policy = None
    if network is not None:
        policy = {
            "allow_hosts": sorted(network.allow_hosts), "deny_hosts": sorted(network.deny_hosts),
            "allow_private_networks": sorted(network.allow_private_networks), "max_bytes": network.max_bytes,
            "max_redirects": network.max_redirects,
        }  # fmt: skip
    return {"network": policy, "keys": keys}


def model_key(request: ModelRequest, endpoint: str) -> str | None:
    """The hash of ``request``'s canonical form at ``endpoint``, or ``None`` when its answer
    is not deterministic (a temperature other than an explicit 0)."""
    if request.temperature is None or request.temperature != 0:
        return None
    canonical = {
        "model": request.model,
        "messages": [m.to_openai() | ({"name": m.name} if m.name else {}) for m in request.messages],
        "tools": list(request.tools),
        "tool_choice": request.tool_choice if request.tools else "none",
        "max_tokens": request.max_tokens,
        "temperature": 0,
        "endpoint": endpoint,
        # every other field that decides the answer (the model profile's and the agent's)
        "parameters": {
            "top_p": request.top_p, "seed": request.seed, "stop": list(request.stop),
            "reasoning_effort": request.reasoning_effort, "response_format": request.response_format,
            "extra_body": dict(request.extra_body),
        },
    }  # fmt: skip
    return _digest("model", canonical)


def tool_key(name: str, settings: dict[str, Any], arguments: str, scope: Mapping[str, Any]) -> str | None:
    """The hash of an idempotent tool call under ``scope`` (:func:`tool_scope`; ``None`` for
    any other tool). Arguments that are JSON are compared as values, so key order and spacing
    do not matter."""
    if name not in IDEMPOTENT_TOOLS:
        return None
    try:
        parsed: Any = load_json(arguments)
    except ValueError:
        parsed = {"raw": arguments}
    return _digest("tool", {"name": name, "settings": settings, "arguments": parsed, "scope": dict(scope)})


def _digest(kind: str, canonical: dict[str, Any]) -> str:
    text = json.dumps(canonical, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return f"{kind}:" + hashlib.sha256(f"{KEY_VERSION}\0{text}".encode()).hexdigest()


def _fingerprint(secret: str | None) -> str:
    """A short hash telling two keys apart without revealing either (``""``: no key)."""
    return hashlib.sha256(f"runner-key-owner\0{secret}".encode()).hexdigest()[:16] if secret else ""


def _model_value(value: Any) -> ModelResponse | None:
    """A stored model answer, or ``None`` when it is not of the shape :meth:`CallCache.keep_response` writes."""
    if not isinstance(value, dict) or not _optional_str(value.get("content")) or not _optional_str(value.get("finish_reason")):
        return None
    calls = value.get("tool_calls", [])
    if not isinstance(calls, list) or not all(_is_call(c) for c in calls):
        return None
    return ModelResponse(
        value.get("content"), tuple(ToolCall(c["id"], c["name"], c["arguments"]) for c in calls),
        model=str(value.get("model") or ""), finish_reason=value.get("finish_reason"),
    )  # fmt: skip


def _tool_value(value: Any) -> ToolResult | None:
    """A stored tool result, or ``None`` when it is not of the shape :meth:`CallCache.keep_tool_result` writes."""
    if not isinstance(value, dict) or not isinstance(value.get("content"), str):
        return None
    stored = value.get("sources", [])
    if not isinstance(stored, list) or not all(isinstance(s, dict) and "kind" in s and "location" in s for s in stored):
        return None
    try:
        sources = tuple(Source.from_dict(s) for s in stored)
    except (TypeError, ValueError):  # a kind this version does not know
        return None
    return ToolResult(value["content"], data=value.get("data"), sources=sources)


def _optional_str(value: Any) -> bool:
    return value is None or isinstance(value, str)


def _is_call(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(value.get(k), str) for k in ("id", "name", "arguments"))
