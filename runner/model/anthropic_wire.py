"""Anthropic's Messages API wire format: request bodies out, messages in.

Pure functions over plain dicts, shared by the ``anthropic`` SDK adapter
(:mod:`runner.model.anthropic_client`), the Message Batches path (each request's ``params``)
and the strict loopback server, so every path builds and parses the same way.

runner's messages are in Chat Completions shape (:class:`~runner.model.base.Message`); here
they become Anthropic's: the system messages go to the top-level ``system`` (text blocks),
an assistant's tool calls become ``tool_use`` blocks, and each ``tool`` message a
``tool_result`` block in the user turn that follows (consecutive results, and a user text
after them, share one user turn, as the API requires). The static prefix (tools, then the
system prompt) carries one ``cache_control`` breakpoint, so every row of a batch reads it
from the prompt cache after the first wrote it. ``temperature`` is not sent: the Messages API
no longer defines it (the anthropic package's ``MessageCreateParams``), and the model profile
refuses it at ``runner validate`` (as it does ``top_p``, ``seed`` and a reasoning effort, none
of which the API defines). ``stop`` goes as ``stop_sequences``, the service tier as Anthropic's
(``auto``, ``standard_only``), ``extra_body`` under the fields set here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from runner import untrusted_json
from runner.core.usage import Usage
from runner.model.base import Message, ModelRequest, ModelResponse, ToolCall
from runner.model.wire import InvalidResponse, as_count, served_tier, visible_surrogates

DEFAULT_MAX_TOKENS = 1024
"""``max_tokens`` is required by the Messages API: sent when the request names none."""
CACHE_CONTROL = {"type": "ephemeral"}
"""A 5-minute prompt cache breakpoint (cache writes billed at 1.25x the input price)."""
_TOOL_CHOICE = {"auto": {"type": "auto"}, "none": {"type": "none"}, "required": {"type": "any"}}
_EMPTY_TEXT = "(empty)"  # the API refuses empty text blocks; an assistant turn that said nothing


def request_body(request: ModelRequest, default_model: str = "") -> dict[str, Any]:
    """The ``messages.create`` arguments for ``request`` (also a batch request's ``params``)."""
    body: dict[str, Any] = {"model": request.model or default_model}
    body["max_tokens"] = request.max_tokens if request.max_tokens is not None else DEFAULT_MAX_TOKENS
    tools = [_tool(tool) for tool in request.tools]
    if tools:
        body["tools"] = tools
        body["tool_choice"] = dict(_TOOL_CHOICE.get(request.tool_choice, _TOOL_CHOICE["auto"]))
    system: list[dict[str, Any]] = [{"type": "text", "text": m.content} for m in request.messages if m.role == "system" and m.content]
    if system:
        body["system"] = system
    # one breakpoint at the end of the static prefix: it caches the tools and the system prompt
    prefix_end = system[-1] if system else tools[-1] if tools else None
    if prefix_end is not None:
        prefix_end["cache_control"] = dict(CACHE_CONTROL)
    if request.stop:
        body["stop_sequences"] = list(request.stop)
    if request.service_tier is not None:
        body["service_tier"] = _SERVICE_TIERS.get(request.service_tier, request.service_tier)
    body["messages"] = _messages(request.messages)
    for name, value in request.extra_body.items():  # model.extra_body: never over a field set here
        body.setdefault(name, value)
    return body


_SERVICE_TIERS = {"auto": "auto", "default": "standard_only"}
"""runner's service tiers in Anthropic's words (the claude profile offers only these two)."""


def _tool(tool: Mapping[str, Any]) -> dict[str, Any]:
    """An OpenAI function tool as an Anthropic client tool."""
    nested = tool.get("function")
    function: Mapping[str, Any] = nested if isinstance(nested, Mapping) else tool
    out: dict[str, Any] = {"name": function["name"]}
    if function.get("description"):
        out["description"] = function["description"]
    out["input_schema"] = dict(function.get("parameters") or {"type": "object", "properties": {}})
    return out


def _messages(messages: tuple[Message, ...]) -> list[dict[str, Any]]:
    turns: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "system":
            continue
        role = "assistant" if message.role == "assistant" else "user"
        blocks = _blocks(message)
        if turns and turns[-1]["role"] == role:  # tool results and a following nudge share one user turn
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    if not turns or turns[0]["role"] != "user":  # the first turn must be the user's
        turns.insert(0, {"role": "user", "content": [{"type": "text", "text": _EMPTY_TEXT}]})
    return turns


def _blocks(message: Message) -> list[dict[str, Any]]:
    if message.role == "tool":
        return [{"type": "tool_result", "tool_use_id": message.tool_call_id or "", "content": message.content or _EMPTY_TEXT}]
    blocks: list[dict[str, Any]] = []
    if message.content:
        blocks.append({"type": "text", "text": message.content})
    for call in message.tool_calls:
        blocks.append({"type": "tool_use", "id": call.id, "name": call.name, "input": _tool_input(call.arguments)})
    return blocks or [{"type": "text", "text": _EMPTY_TEXT}]


def _tool_input(arguments: str) -> dict[str, Any]:
    """A tool call's JSON text as the object ``tool_use.input`` must be (anything else kept as text)."""
    try:
        parsed = untrusted_json.loads(arguments or "{}")
    except (ValueError, untrusted_json.JsonTooDeep):
        parsed = None
    return parsed if isinstance(parsed, dict) else {"arguments": arguments}


def parse_message(data: object) -> ModelResponse:
    """A decoded Messages API ``message`` as a :class:`ModelResponse`; :class:`InvalidResponse`
    when it is not one (an error object, no content list, a tool use without a name)."""
    if not isinstance(data, Mapping):
        raise InvalidResponse(f"expected a JSON object, got {type(data).__name__}")
    if data.get("type") == "error":
        error = data.get("error")
        detail = error.get("message") if isinstance(error, Mapping) else error
        raise InvalidResponse(f"the response is an error: {str(detail)[:300]}")
    content = data.get("content")
    if data.get("type") != "message" or not isinstance(content, list):
        raise InvalidResponse("the response is not a message with a content list")
    texts: list[str] = []
    calls: list[ToolCall] = []
    for block in content:
        if not isinstance(block, Mapping):
            raise InvalidResponse("a content block is not an object")
        if block.get("type") == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif block.get("type") == "tool_use":
            calls.append(_tool_call(block))
    return ModelResponse(
        content=visible_surrogates("".join(texts)) if texts else None,
        tool_calls=tuple(calls),
        usage=parse_usage(data.get("usage")),
        model=str(data.get("model") or ""),
        finish_reason=_finish_reason(data.get("stop_reason")),
        service_tier=_served_tier(data.get("usage")),
    )


def _served_tier(usage: object) -> str | None:
    """``usage.service_tier``: the tier that served the call (``standard``, ``priority``, ``batch``)."""
    return served_tier(usage.get("service_tier")) if isinstance(usage, Mapping) else None


def _tool_call(block: Mapping[str, Any]) -> ToolCall:
    name = block.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidResponse("a tool_use block has no name")
    arguments = json.dumps(block.get("input") if block.get("input") is not None else {}, ensure_ascii=False)
    return ToolCall(id=visible_surrogates(str(block.get("id") or "")), name=visible_surrogates(name), arguments=visible_surrogates(arguments))


_FINISH = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length", "tool_use": "tool_calls", "refusal": "content_filter"}


def _finish_reason(stop_reason: object) -> str | None:
    """Anthropic's ``stop_reason`` in Chat Completions words (the loop reads ``length``)."""
    return _FINISH.get(str(stop_reason), str(stop_reason)) if stop_reason is not None else None


def parse_usage(usage: object) -> Usage:
    """Anthropic's usage in runner's terms. Its ``input_tokens`` counts only the tokens after the
    last cache breakpoint; runner's counts every prompt token (as OpenAI's ``prompt_tokens``), so
    the cache reads and writes are added to it; ``cached_input_tokens`` are the reads and
    ``cache_write_tokens`` the writes (priced at the profile's cache-write rate)."""
    if not isinstance(usage, Mapping):
        return Usage()
    fresh = as_count(usage.get("input_tokens"))
    read = as_count(usage.get("cache_read_input_tokens"))
    written = as_count(usage.get("cache_creation_input_tokens"))
    return Usage(
        input_tokens=fresh + read + written, output_tokens=as_count(usage.get("output_tokens")),
        cached_input_tokens=read, cache_write_tokens=written,
    )  # fmt: skip
