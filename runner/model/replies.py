"""Scripted replies: what the scripted server sends and the scripted model returns.

A :class:`Reply` is data (content, tool calls, a fault, delays, a usage override); it
is rendered here into the exact Chat Completions JSON a real endpoint would send, as a
whole completion or as stream chunks, so both test doubles exercise the same parsing
code as production. The rule format around replies is documented in
:mod:`runner.model.script_rules`.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from runner.errors import ConfigError
from runner.model.tokens import (
    OPENAI_FRAMING,
    TokenCounter,
    counter_for_model,
    exact_counter,
    utf8_length,
)

# How a scripted endpoint counts the usage it reports (the script's ``tokenizer`` key).
USAGE_TOKENIZERS = ("estimate", "o200k_base", "cl100k_base", "utf8_bytes")
_HONEST_BYTES = TokenCounter("utf8_bytes", False, utf8_length, OPENAI_FRAMING)

INVALID_JSON_BODY = '{"id": "chatcmpl-broken", "object": "chat.completion", "choices": [{"mess'


@dataclass(frozen=True)
class ScriptedToolCall:
    """A tool call to send. ``arguments`` is raw text, so malformed JSON can be scripted."""

    name: str
    arguments: str = "{}"
    id: str | None = None


@dataclass(frozen=True)
class HttpFault:
    """An HTTP error answer: ``status``, optional ``Retry-After`` seconds, body, headers.
    ``billed``: the endpoint produced (and billed) the completion first, then failed, like a
    gateway whose upstream finished after the gateway gave up."""

    status: int
    retry_after: float | None = None
    body: str | dict[str, Any] | None = None
    headers: tuple[tuple[str, str], ...] = ()
    billed: bool = False

    def body_bytes(self) -> tuple[bytes, str]:
        """The body and its content type; by default an OpenAI-style error object."""
        if isinstance(self.body, str):
            return self.body.encode(), "text/plain; charset=utf-8"
        body = self.body or {
            "error": {"message": f"scripted fault: HTTP {self.status}", "type": "scripted_fault", "code": None}
        }
        return json.dumps(body).encode(), "application/json"


@dataclass(frozen=True)
class Reply:
    """One scripted answer. Without a fault, it is a 200 chat completion."""

    content: str | None = None
    tool_calls: tuple[ScriptedToolCall, ...] = ()
    finish_reason: str | None = None
    usage: tuple[tuple[str, int], ...] = ()
    latency_seconds: float = 0.0
    hang_seconds: float = 0.0
    fault: HttpFault | None = None
    invalid_json: bool = False
    service_tier: str | None = None  # the tier the answer says served it (default: the one asked for, when asked)

    @classmethod
    def from_obj(cls, obj: object, where: str) -> Reply:
        """Build from YAML/JSON data: a string (the content) or a mapping of reply keys."""
        if isinstance(obj, str):
            return cls(content=obj)
        data = check_keys(obj, _REPLY_KEYS, where)
        fault = _fault_from_obj(data["fault"], f"{where}.fault") if data.get("fault") is not None else None
        calls = data.get("tool_calls") or []
        if not isinstance(calls, list):
            raise ConfigError(f"{where}.tool_calls: expected a list of {{name, arguments}}")
        reply = cls(
            content=_optional(data, "content", str, where),
            tool_calls=tuple(_tool_call_from_obj(c, f"{where}.tool_calls[{i}]") for i, c in enumerate(calls)),
            finish_reason=_optional(data, "finish_reason", str, where),
            usage=_usage_from_obj(data.get("usage"), f"{where}.usage"),
            latency_seconds=float(_optional(data, "latency_seconds", (int, float), where) or 0),
            hang_seconds=float(_optional(data, "hang_seconds", (int, float), where) or 0),
            fault=fault,
            invalid_json=bool(_optional(data, "invalid_json", bool, where)),
            service_tier=_optional(data, "service_tier", str, where),
        )
        if fault and (reply.content is not None or reply.tool_calls or reply.invalid_json):
            raise ConfigError(f"{where}: a fault reply cannot also have content, tool_calls or invalid_json")
        return reply

    def completion(self, request_body: Mapping[str, Any], serial: int, tokenizer: str = "estimate") -> dict[str, Any]:
        """The ``chat.completion`` JSON for this reply to ``request_body``, its usage
        counted by ``tokenizer`` (see :func:`usage_counter`)."""
        calls = [
            {
                "id": call.id or f"call_{serial}_{i}",
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for i, call in enumerate(self.tool_calls)
        ]
        message: dict[str, Any] = {"role": "assistant", "content": self.content}
        if calls:
            message["tool_calls"] = calls
        # as OpenAI: a request that names a tier gets the tier that served it back (here: the one asked, unless scripted)
        tier = self.service_tier or request_body.get("service_tier")
        return {
            "id": f"chatcmpl-scripted-{serial}",
            "object": "chat.completion",
            "created": 0,
            "model": str(request_body.get("model") or "scripted"),
            "choices": [{"index": 0, "message": message, "finish_reason": self._finish_reason()}],
            "usage": self._usage(request_body, usage_counter(tokenizer, str(request_body.get("model") or ""))),
            **({"service_tier": tier} if tier else {}),
        }

    def _finish_reason(self) -> str:
        return self.finish_reason or ("tool_calls" if self.tool_calls else "stop")

    def _usage(self, request_body: Mapping[str, Any], counter: TokenCounter) -> dict[str, Any]:
        override = dict(self.usage)
        prompt = override.get("prompt_tokens", counter.prompt_tokens(request_body))
        completion = override.get(
            "completion_tokens",
            counter.completion_tokens(self.content, [(c.name, c.arguments) for c in self.tool_calls]),
        )
        details = {"cached_tokens": override.get("cached_tokens", 0)}
        if "cache_write_tokens" in override:
            details["cache_write_tokens"] = override["cache_write_tokens"]
        usage = {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": details,
        }
        if "reasoning_tokens" in override:
            usage["completion_tokens_details"] = {"reasoning_tokens": override["reasoning_tokens"]}
        return usage


def usage_counter(tokenizer: str, model: str) -> TokenCounter:
    """How a scripted endpoint counts usage for a request to ``model``.

    ``estimate`` (the default) reports what the runner reserves for the request, so tests
    of budget logic see reserved == billed. The others are honest endpoints with a known
    tokenizer and OpenAI's framing: ``o200k_base`` / ``cl100k_base`` count exactly like
    OpenAI; ``utf8_bytes`` is the worst honest tokenizer, one token per UTF-8 byte.
    """
    if tokenizer == "estimate":
        return counter_for_model(model)
    if tokenizer == "utf8_bytes":
        return _HONEST_BYTES
    return exact_counter(tokenizer)


def completion_chunks(completion: Mapping[str, Any], include_usage: bool) -> list[dict[str, Any]]:
    """Split a completion into ``chat.completion.chunk`` dicts, as a streaming endpoint would.

    Content arrives word by word; each tool call as a header (id, name) then its
    arguments in two pieces; then the finish reason; then, if asked, a usage chunk.
    """
    choice = completion["choices"][0]
    message = choice["message"]
    deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
    deltas += [{"content": piece} for piece in re.findall(r"\s*\S+\s*", message.get("content") or "")]
    for index, call in enumerate(message.get("tool_calls") or ()):
        header = {"index": index, "id": call["id"], "type": "function"}
        deltas.append({"tool_calls": [{**header, "function": {"name": call["function"]["name"], "arguments": ""}}]})
        arguments = call["function"]["arguments"]
        for piece in (arguments[: len(arguments) // 2], arguments[len(arguments) // 2 :]):
            if piece:
                deltas.append({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
    head = {k: completion[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    extra = {"usage": None} if include_usage else {}
    chunks = [head | {"choices": [{"index": 0, "delta": d, "finish_reason": None}]} | extra for d in deltas]
    chunks.append(head | {"choices": [{"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}]} | extra)
    if include_usage:
        chunks.append(head | {"choices": [], "usage": completion["usage"]})
    return chunks


def check_keys(obj: object, allowed: Sequence[str], where: str) -> dict[str, Any]:
    """Return ``obj`` as a dict, or raise ConfigError naming an unknown key (with a suggestion)."""
    if not isinstance(obj, Mapping):
        raise ConfigError(f"{where}: expected a mapping, got {type(obj).__name__}")
    for key in obj:
        if key not in allowed:
            close = difflib.get_close_matches(str(key), allowed, n=1)
            hint = f" Did you mean '{close[0]}'?" if close else f" Allowed: {', '.join(allowed)}."
            raise ConfigError(f"{where}: unknown key '{key}'.{hint}")
    return dict(obj)


_REPLY_KEYS = (
    "content", "tool_calls", "finish_reason", "usage", "latency_seconds", "hang_seconds", "fault", "invalid_json",
    "service_tier",
)  # fmt: skip


def _optional(data: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    value = data.get(key)
    if value is not None and (not isinstance(value, kind) or (kind is not bool and isinstance(value, bool))):
        raise ConfigError(f"{where}.{key}: unexpected value {value!r}")
    return value


def _tool_call_from_obj(obj: object, where: str) -> ScriptedToolCall:
    data = check_keys(obj, ("name", "arguments", "id"), where)
    if not isinstance(data.get("name"), str):
        raise ConfigError(f"{where}.name: a tool call needs a name")
    arguments = data.get("arguments", {})
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return ScriptedToolCall(name=data["name"], arguments=raw, id=_optional(data, "id", str, where))


def _fault_from_obj(obj: object, where: str) -> HttpFault:
    data = check_keys(obj, ("status", "retry_after", "body", "headers", "billed"), where)
    status = data.get("status")
    if not isinstance(status, int) or not 400 <= status <= 599:
        raise ConfigError(f"{where}.status: expected an HTTP error status 400-599, got {status!r}")
    headers = check_keys(data.get("headers") or {}, tuple(data.get("headers") or {}), f"{where}.headers")
    retry_after = _optional(data, "retry_after", (int, float), where)
    return HttpFault(
        status=status,
        retry_after=float(retry_after) if retry_after is not None else None,
        body=_optional(data, "body", (str, dict), where),
        headers=tuple((str(k), str(v)) for k, v in headers.items()),
        billed=bool(_optional(data, "billed", bool, where)),
    )


def _usage_from_obj(obj: object, where: str) -> tuple[tuple[str, int], ...]:
    if obj is None:
        return ()
    data = check_keys(obj, ("prompt_tokens", "completion_tokens", "cached_tokens", "cache_write_tokens", "reasoning_tokens"), where)
    for key, value in data.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ConfigError(f"{where}.{key}: expected a non-negative integer, got {value!r}")
    return tuple(data.items())
