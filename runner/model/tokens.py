"""Token counts that never err low, used to reserve budget before a call is made.

The caps layer reserves ``estimate_prompt_tokens(request) + max_tokens`` at the model's
price before each call and reconciles with the endpoint's ``usage`` afterwards, so a
prompt estimate that is too low lets a run overspend. A :class:`TokenCounter` counts
every text a request sends (message contents, roles, names, tool-call ids, names and
arguments, tool results, the JSON of the tool schemas and of the response format) and
adds a chat format's framing around them:

* **OpenAI models** (gpt-4o, gpt-4.1, gpt-5, o1/o3/o4 -> ``o200k_base``; gpt-4,
  gpt-3.5 -> ``cl100k_base``) are counted exactly with OpenAI's own tokenizer
  (``tiktoken``, from encoding files shipped with the runner: no network), plus OpenAI's
  documented framing (3 tokens per message, 1 per name, 3 to prime the reply).
* **Every other model** is counted as the UTF-8 length of each text in bytes. No BPE
  tokenizer yields more tokens than bytes: byte-level BPE (GPT-2, tiktoken, Llama 3, Qwen,
  SmolLM2, Mistral's tekken) emits tokens of one byte or more, and SentencePiece with byte
  fallback spells an unknown character with at most its UTF-8 length in byte tokens. The
  framing allowed for an unknown chat template (:data:`ANY_TEMPLATE_FRAMING`) covers the
  widespread ones (ChatML, Llama 2/3, Mistral, Gemma, DeepSeek, Hermes/Qwen tool prompts),
  including a default system prompt and SentencePiece's leading space token.

Tool schemas are counted as their compact JSON text; the real rendering (OpenAI's
TypeScript-like tool namespace, a template's tool prompt) is shorter than that JSON plus
the framing allowed for it. Images and audio in messages are not bounded (the runner never
sends them).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Any

from runner.model.base import ModelRequest
from runner.model.encodings import ENCODINGS, load_encoding
from runner.model.wire import request_body


@dataclass(frozen=True)
class Framing:
    """Tokens a chat format adds beyond the texts of a request.

    ``escape_schemas``: count tool and response-format schemas in their longer,
    ``\\uXXXX``-escaped JSON form (templates differ in how they render non-ASCII text).
    """

    per_request: int
    per_message: int
    per_name: int
    per_tool_call: int
    per_tool: int
    tool_list: int
    response_format: int
    escape_schemas: bool = False


# OpenAI's chat format (cookbook "How to count tokens with tiktoken": 3 per message,
# 1 per name, 3 to prime the reply). Tool calls and tool lists are rendered in a hidden
# format; their JSON is longer than that rendering, and the constants add a margin.
OPENAI_FRAMING = Framing(
    per_request=3, per_message=3, per_name=1, per_tool_call=8, per_tool=8, tool_list=16, response_format=16
)
# Any chat template: BOS, the reply primer and a default system prompt (SmolLM2's and
# Qwen's are about 20 tokens, Llama 3.1's date header about 30); per message, markers
# such as Llama 2's "[INST] <<SYS>> ... <</SYS>> [/INST]" (about 20 for a pair); per call,
# a re-rendered '<tool_call>{"name": ..., "arguments": ...}</tool_call>'; per tool list, a
# tool-use instruction prompt (Hermes' is about 180 tokens).
ANY_TEMPLATE_FRAMING = Framing(
    per_request=64, per_message=16, per_name=4, per_tool_call=32, per_tool=16, tool_list=512, response_format=64,
    escape_schemas=True,
)  # fmt: skip


def utf8_length(text: str) -> int:
    """Bytes of ``text`` in UTF-8 (a lone surrogate counts 3, like the U+FFFD it becomes)."""
    return len(text.encode("utf-8", "surrogatepass"))


@dataclass(frozen=True)
class TokenCounter:
    """How the tokens of one model's requests are counted: a text measure and a framing.

    ``exact`` is true when ``count_text`` is the model's own tokenizer; otherwise it is an
    upper bound (UTF-8 bytes).
    """

    name: str
    exact: bool
    count_text: Callable[[str], int]
    framing: Framing

    def prompt_tokens(self, body: Mapping[str, Any]) -> int:
        """Input tokens of a Chat Completions request body, never fewer than billed."""
        frame = self.framing
        total = frame.per_request
        for message in _mappings(body.get("messages")):
            total += self._message_tokens(message)
        tools = _mappings(body.get("tools"))
        if tools:
            total += frame.tool_list + frame.per_tool * len(tools) + self._json_tokens(tools)
        if body.get("response_format"):
            total += frame.response_format + self._json_tokens(body["response_format"])
        return total

    def completion_tokens(self, content: str | None, tool_calls: Sequence[tuple[str, str]] = ()) -> int:
        """Output tokens of a reply: its text plus ``(name, arguments)`` tool calls."""
        total = self.count_text(content or "")
        for name, arguments in tool_calls:
            total += self.framing.per_tool_call + self.count_text(name) + self.count_text(arguments)
        return total

    def _message_tokens(self, message: Mapping[str, Any]) -> int:
        frame = self.framing
        total = frame.per_message + self.count_text(str(message.get("role") or ""))
        total += self.count_text(_content_text(message.get("content")))
        if message.get("name"):
            total += frame.per_name + self.count_text(str(message["name"]))
        if message.get("tool_call_id"):
            total += self.count_text(str(message["tool_call_id"]))
        for call in _mappings(message.get("tool_calls")):
            function = call["function"] if isinstance(call.get("function"), Mapping) else {}
            arguments = function.get("arguments", "")
            total += frame.per_tool_call + self.count_text(str(call.get("id") or ""))
            total += self.count_text(str(function.get("name") or ""))
            total += self.count_text(arguments if isinstance(arguments, str) else json.dumps(arguments))
        return total

    def _json_tokens(self, value: object) -> int:
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=self.framing.escape_schemas, default=str)
        return self.count_text(text)


UTF8_BYTES_BOUND = TokenCounter("utf8_bytes_bound", False, utf8_length, ANY_TEMPLATE_FRAMING)
"""The counter for models whose tokenizer is not known: an upper bound."""


@cache
def exact_counter(encoding_name: str) -> TokenCounter:
    """The exact counter for OpenAI's encoding ``encoding_name`` with OpenAI's framing."""
    encoding = load_encoding(encoding_name)

    def count(text: str) -> int:
        return len(encoding.encode_ordinary(text)) if text else 0

    return TokenCounter(encoding_name, True, count, OPENAI_FRAMING)


def encoding_name_for_model(model_id: str) -> str | None:
    """The shipped OpenAI encoding of ``model_id`` (also as ``openai/<id>``), or ``None``.

    The model-to-encoding table is tiktoken's; encodings the runner does not ship (or
    tiktoken not installed) give ``None``, and the model is then counted by the bound.
    """
    try:
        from tiktoken.model import encoding_name_for_model as tiktoken_lookup
    except ImportError:
        return None
    try:
        name = tiktoken_lookup(model_id.removeprefix("openai/"))
    except KeyError:
        return None
    return name if name in ENCODINGS else None


@lru_cache(maxsize=256)
def counter_for_model(model_id: str) -> TokenCounter:
    """Exact for OpenAI's model families, :data:`UTF8_BYTES_BOUND` for every other model."""
    name = encoding_name_for_model(model_id)
    return exact_counter(name) if name else UTF8_BYTES_BOUND


def estimate_prompt_tokens(request: ModelRequest) -> int:
    """The input tokens the endpoint may bill for ``request``; never fewer than it bills."""
    return estimate_body_tokens(request_body(request))


def estimate_body_tokens(body: Mapping[str, Any]) -> int:
    """Same as :func:`estimate_prompt_tokens`, over an OpenAI request body dict."""
    return counter_for_model(str(body.get("model") or "")).prompt_tokens(body)


def estimate_completion_tokens(
    content: str | None, tool_calls: Sequence[tuple[str, str]] = (), model: str = ""
) -> int:
    """The output tokens of a reply (its text plus ``(name, arguments)`` calls) by
    ``model``'s counter; without a model, the upper bound."""
    return counter_for_model(model).completion_tokens(content, tool_calls)


def estimate_text_tokens(text: str | None, model: str = "") -> int:
    """Tokens of ``text`` alone (0 for ``None``), never fewer than ``model`` would use;
    without a model, the upper bound (its UTF-8 bytes)."""
    return counter_for_model(model).count_text(text) if text else 0


def _mappings(value: object) -> list[Mapping[str, Any]]:
    if isinstance(value, Sequence) and not isinstance(value, str):
        return [item for item in value if isinstance(item, Mapping)]
    return []


def _content_text(content: object) -> str:
    """Message content is a string or, in the multi-part form, a list of parts: text parts
    count as their text, any other part as its JSON."""
    if isinstance(content, str):
        return content
    parts = []
    for part in _mappings(content):
        text = part.get("text")
        parts.append(text if isinstance(text, str) else json.dumps(part, separators=(",", ":"), default=str))
    return "".join(parts)
