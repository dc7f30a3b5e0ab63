"""Cheap token estimates, used to reserve budget before a call is made.

The caps layer reserves ``estimate_prompt_tokens(request) + max_tokens`` at the model's
price before each call and reconciles with the endpoint's ``usage`` afterwards, so an
estimate that is too low lets a run overspend. These functions therefore err on the
high side, without a tokenizer:

* ASCII text counts one token per 3 characters (real BPE tokenizers average about 4
  for English prose and about 3 for code and JSON);
* every non-ASCII character counts as one token (CJK text is close to that; accented
  Latin text is overestimated, which is the safe direction);
* every message adds 4 tokens of framing, every tool call 8, the reply primer 3;
* tool schemas are counted as their compact JSON text.

The scripted server and the scripted model report the same estimates as ``usage``, so
tests of budget logic see consistent numbers.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from runner.model.base import ModelRequest
from runner.model.wire import request_body

ASCII_CHARS_PER_TOKEN = 3
MESSAGE_OVERHEAD_TOKENS = 4
TOOL_CALL_OVERHEAD_TOKENS = 8
REPLY_PRIMER_TOKENS = 3


def estimate_text_tokens(text: str | None) -> int:
    """Estimate the tokens of ``text`` (0 for ``None`` or empty), rounding up."""
    if not text:
        return 0
    if text.isascii():
        return math.ceil(len(text) / ASCII_CHARS_PER_TOKEN)
    ascii_chars = len(text.encode("ascii", "ignore"))
    return math.ceil(ascii_chars / ASCII_CHARS_PER_TOKEN) + (len(text) - ascii_chars)


def estimate_prompt_tokens(request: ModelRequest) -> int:
    """Estimate, on the high side, the input tokens the endpoint will bill for ``request``."""
    return estimate_body_tokens(request_body(request))


def estimate_body_tokens(body: Mapping[str, Any]) -> int:
    """Same estimate as :func:`estimate_prompt_tokens`, over an OpenAI request body dict."""
    messages = body.get("messages") or []
    tools = body.get("tools") or []
    total = REPLY_PRIMER_TOKENS
    for message in messages if isinstance(messages, Sequence) else []:
        if isinstance(message, Mapping):
            total += _message_tokens(message)
    if tools:
        total += estimate_text_tokens(json.dumps(tools, separators=(",", ":"), ensure_ascii=False))
    return total


def estimate_completion_tokens(content: str | None, tool_calls: Sequence[tuple[str, str]] = ()) -> int:
    """Estimate the output tokens of a reply: its text plus ``(name, arguments)`` calls."""
    total = estimate_text_tokens(content)
    for name, arguments in tool_calls:
        total += TOOL_CALL_OVERHEAD_TOKENS + estimate_text_tokens(name) + estimate_text_tokens(arguments)
    return total


def _message_tokens(message: Mapping[str, Any]) -> int:
    total = MESSAGE_OVERHEAD_TOKENS + estimate_text_tokens(_content_text(message.get("content")))
    for call in message.get("tool_calls") or []:
        function = call.get("function", {}) if isinstance(call, Mapping) else {}
        total += TOOL_CALL_OVERHEAD_TOKENS
        total += estimate_text_tokens(str(function.get("name", "")))
        total += estimate_text_tokens(str(function.get("arguments", "")))
    return total


def _content_text(content: object) -> str:
    """Message content is a string or, in the multi-part form, a list of text parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return ""
