"""What Anthropic's Messages API refuses, and how the loopback server answers from a script.

Used by the strict Anthropic server (:mod:`runner.model.anthropic_server`): the checks a
request body must pass as Anthropic documents them (required ``model``, ``max_tokens`` and
``messages``; no top-level field the API does not define; alternating turns that
start with the user's; every ``tool_use`` answered by a ``tool_result`` in the next user
turn; at most four ``cache_control`` breakpoints), the error shape
``{"type": "error", "error": {"type": ..., "message": ...}}``, and the translation between an
Anthropic request and the Chat Completions shape the script rules match on
(:mod:`runner.model.script_rules`), so one script answers both servers.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from runner.model.replies import Reply

TOP_LEVEL = frozenset({
    "model", "max_tokens", "messages", "system", "tools", "tool_choice", "stop_sequences", "stream", "metadata",
    "thinking", "service_tier", "container", "cache_control", "diagnostics", "inference_geo", "output_config", "speed",
    "user_profile_id", "workspace_id",
})  # fmt: skip
"""The fields ``POST /v1/messages`` accepts, as the anthropic package's ``MessageCreateParams``
defines them (2.x: no ``temperature``, ``top_p`` or ``top_k`` any more); any other is a 400."""
ERROR_TYPES = {
    400: "invalid_request_error", 401: "authentication_error", 403: "permission_error", 404: "not_found_error",
    413: "request_too_large", 429: "rate_limit_error", 500: "api_error", 529: "overloaded_error",
}  # fmt: skip
MAX_BREAKPOINTS = 4
_ANTHROPIC_TIERS = {"standard": "standard", "priority": "priority", "batch": "batch"}
"""``usage.service_tier``'s values: a scripted reply's ``service_tier`` if it is one of them, else ``standard``."""


def error_body(status: int, message: str) -> dict[str, Any]:
    """Anthropic's error object for an HTTP status."""
    kind = ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return {"type": "error", "error": {"type": kind, "message": message}}


def problems(body: Mapping[str, Any]) -> str | None:
    """Why the Messages API would answer 400 to ``body`` (``None``: it would not)."""
    unknown = sorted(set(body) - TOP_LEVEL)
    if unknown:
        return f"{unknown[0]}: Extra inputs are not permitted"
    for field in ("model", "max_tokens", "messages"):
        if field not in body:
            return f"{field}: Field required"
    max_tokens = body["max_tokens"]
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        return "max_tokens: Input should be a valid integer greater than or equal to 1"
    if "system" in body and not isinstance(body["system"], (str, list)):
        return "system: Input should be a valid string or a list of text blocks"
    return _tool_problems(body) or _turn_problems(body["messages"]) or _cache_problems(body)


def _tool_problems(body: Mapping[str, Any]) -> str | None:
    for index, tool in enumerate(body.get("tools") or ()):
        if not isinstance(tool, Mapping) or not tool.get("name") or not isinstance(tool.get("input_schema"), Mapping):
            return f"tools.{index}: a custom tool needs a name and an input_schema object"
    choice = body.get("tool_choice")
    if choice is not None and (not isinstance(choice, Mapping) or choice.get("type") not in ("auto", "any", "tool", "none")):
        return "tool_choice: Input tag does not match any of the expected tags: 'auto', 'any', 'tool', 'none'"
    return None


def _turn_problems(messages: object) -> str | None:
    if not isinstance(messages, list) or not messages:
        return "messages: at least one message is required"
    expected_results: set[str] = set()
    for index, message in enumerate(messages):
        if not isinstance(message, Mapping) or message.get("role") not in ("user", "assistant"):
            return f"messages.{index}.role: Input should be 'user' or 'assistant'"
        if index == 0 and message["role"] != "user":
            return "messages: first message must use the \"user\" role"
        if index and messages[index - 1].get("role") == message["role"]:
            return "messages: roles must alternate between \"user\" and \"assistant\""
        blocks = _content_blocks(message.get("content"))
        if blocks is None:
            return f"messages.{index}.content: Input should be a valid string or a list of content blocks"
        for block in blocks:
            if block.get("type") == "text" and not block.get("text"):
                return f"messages.{index}: text content blocks must be non-empty"
        results = {str(b.get("tool_use_id")) for b in blocks if b.get("type") == "tool_result"}
        if expected_results - results:
            return (f"messages.{index}: `tool_use` ids were found without `tool_result` blocks immediately after: "
                    f"{', '.join(sorted(expected_results - results))}")  # fmt: skip
        expected_results = {str(b.get("id")) for b in blocks if b.get("type") == "tool_use"}
    return None


def _content_blocks(content: object) -> list[Mapping[str, Any]] | None:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, list) and content and all(isinstance(b, Mapping) for b in content):
        return list(content)
    return None


def _cache_problems(body: Mapping[str, Any]) -> str | None:
    count = sum(1 for block in _prefix_blocks(body) if isinstance(block, Mapping) and "cache_control" in block)
    for message in body["messages"]:
        count += sum(1 for block in _content_blocks(message.get("content")) or () if "cache_control" in block)
    if count > MAX_BREAKPOINTS:
        return f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. Found {count}."
    return None


def _prefix_blocks(body: Mapping[str, Any]) -> list[Any]:
    system = body.get("system")
    return [*(body.get("tools") or ()), *(system if isinstance(system, list) else ())]


def cached_prefix(body: Mapping[str, Any]) -> str | None:
    """The text of the prefix up to the last ``cache_control`` breakpoint in tools and system
    (the part the server caches), or ``None`` when it marks none."""
    blocks = _prefix_blocks(body)
    marked = [i for i, block in enumerate(blocks) if isinstance(block, Mapping) and "cache_control" in block]
    if not marked:
        return None
    return json.dumps(blocks[: marked[-1] + 1], sort_keys=True)


def chat_body(body: Mapping[str, Any]) -> dict[str, Any]:
    """The Chat Completions body the script rules match an Anthropic request as."""
    messages: list[dict[str, Any]] = []
    system = body.get("system")
    if system:
        text = system if isinstance(system, str) else "\n".join(str(b.get("text") or "") for b in system)
        messages.append({"role": "system", "content": text})
    for message in body.get("messages") or ():
        messages += _chat_messages(message)
    tools = [
        {"type": "function", "function": {"name": t.get("name"), "description": t.get("description", ""), "parameters": t.get("input_schema")}}
        for t in body.get("tools") or ()
    ]  # fmt: skip
    chat: dict[str, Any] = {"model": body.get("model"), "messages": messages, "max_tokens": body.get("max_tokens")}
    if tools:
        chat["tools"] = tools
    return chat


def _chat_messages(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for block in _content_blocks(message.get("content")) or ():
        if block.get("type") == "text":
            texts.append(str(block.get("text") or ""))
        elif block.get("type") == "tool_use":
            arguments = json.dumps(block.get("input") or {})
            calls.append({"id": block.get("id"), "type": "function", "function": {"name": block.get("name"), "arguments": arguments}})
        elif block.get("type") == "tool_result":
            content = block.get("content")
            text = content if isinstance(content, str) else "".join(str(c.get("text") or "") for c in content or ())
            out.append({"role": "tool", "tool_call_id": block.get("tool_use_id"), "content": text})
    if texts or calls:
        said: dict[str, Any] = {"role": message.get("role"), "content": "".join(texts) or None}
        if calls:
            said["tool_calls"] = calls
        out.append(said)
    return out


def message_from(reply: Reply, body: Mapping[str, Any], serial: int, tokenizer: str, cache: tuple[int, int]) -> dict[str, Any]:
    """The Messages API answer for a scripted ``reply``; ``cache``: ``(read, written)`` prompt
    tokens of the cached prefix (Anthropic's ``input_tokens`` counts only the rest)."""
    completion = reply.completion(chat_body(body), serial, tokenizer)
    message = completion["choices"][0]["message"]
    content: list[dict[str, Any]] = []
    if message.get("content"):
        content.append({"type": "text", "text": message["content"]})
    for call in message.get("tool_calls") or ():
        try:
            arguments = json.loads(call["function"]["arguments"] or "{}")
        except ValueError:
            arguments = {}
        tool_id = "toolu_" + "".join(c for c in str(call["id"]) if c.isalnum() or c in "_-")
        content.append({"type": "tool_use", "id": tool_id, "name": call["function"]["name"], "input": arguments if isinstance(arguments, dict) else {}})
    usage = completion["usage"]
    read, written = cache
    stop = {"tool_calls": "tool_use", "length": "max_tokens"}.get(completion["choices"][0]["finish_reason"], "end_turn")
    return {
        "id": f"msg_scripted_{serial:06d}", "type": "message", "role": "assistant", "model": body.get("model"),
        "content": content, "stop_reason": stop, "stop_sequence": None,
        "usage": {
            "input_tokens": max(int(usage["prompt_tokens"]) - read - written, 0), "output_tokens": int(usage["completion_tokens"]),
            "cache_creation_input_tokens": written, "cache_read_input_tokens": read,
            "service_tier": _ANTHROPIC_TIERS.get(str(completion.get("service_tier")), "standard"),
        },
    }  # fmt: skip
