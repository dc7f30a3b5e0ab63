"""The Chat Completions wire format: request bodies out, completions and stream chunks in.

Pure functions over plain dicts, shared by the openai SDK adapter (which converts SDK
objects to dicts first), the scripted server and the scripted model, so every path
parses answers the same way.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from runner.model.base import Message, ModelRequest, ModelResponse, ToolCall, Usage


class InvalidResponse(ValueError):
    """A 200 answer that is not a usable chat completion (missing choices, bad tool call)."""


def request_body(request: ModelRequest) -> dict[str, Any]:
    """Build the ``chat.completions.create`` arguments for ``request``.

    Fields that are ``None`` are left out so the endpoint's defaults apply; ``tools`` and
    ``tool_choice`` are sent only when tools are offered (some servers reject an empty
    list). The completion bound goes in ``request.tokens_field`` (the model profile's:
    ``max_completion_tokens`` for OpenAI's current models, which refuse ``max_tokens`` on
    reasoning models). ``extra_body`` adds fields runner does not set (never over one it does).

    The order is the cache order: what every call of an agent shares (model, tools, the
    parameters, ``prompt_cache_key``) comes first and the messages last, so the bodies of
    two rows of a batch are byte-identical up to the first message that differs (the
    messages themselves start with the system prompt and the examples, the goal after them).
    """
    body: dict[str, Any] = {"model": request.model}
    if request.tools:
        body["tools"] = [dict(tool) for tool in request.tools]
        body["tool_choice"] = request.tool_choice
    if request.max_tokens is not None:
        body[request.tokens_field] = request.max_tokens
    optional = {
        "temperature": request.temperature, "top_p": request.top_p, "seed": request.seed,
        "stop": list(request.stop) or None, "reasoning_effort": request.reasoning_effort,
        "service_tier": request.service_tier, "response_format": request.response_format,
        "prompt_cache_key": request.prompt_cache_key,
    }  # fmt: skip
    body.update((name, value) for name, value in optional.items() if value is not None)
    body.update((name, value) for name, value in request.extra_body.items() if name not in body and name != "messages")
    body["messages"] = [message.to_openai() for message in request.messages]
    return body


def parse_completion(data: object) -> ModelResponse:
    """Turn a decoded ``chat.completion`` object into a :class:`ModelResponse`.

    Raises :class:`InvalidResponse` when the data has no usable first choice.
    """
    if not isinstance(data, Mapping):
        raise InvalidResponse(f"expected a JSON object, got {type(data).__name__}")
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
        error = data.get("error")
        if error:  # a gateway that answers 200 with an error object
            detail = error.get("message") if isinstance(error, Mapping) else error
            raise InvalidResponse(f"the response has no choices but an error: {str(detail)[:300]}")
        raise InvalidResponse("the response has no choices")
    message = choices[0].get("message")
    if not isinstance(message, Mapping):
        raise InvalidResponse("the first choice has no message")
    content = message.get("content")
    return ModelResponse(
        content=visible_surrogates(content) if isinstance(content, str) else None,
        tool_calls=tuple(_parse_tool_call(call) for call in message.get("tool_calls") or ()),
        usage=parse_usage(data.get("usage")),
        model=str(data.get("model") or ""),
        finish_reason=choices[0].get("finish_reason"),
        service_tier=served_tier(data.get("service_tier")),
    )


def served_tier(value: object) -> str | None:
    """The service tier an answer says served it (``None`` when it names none)."""
    return value if isinstance(value, str) and value else None


def completion_body(response: ModelResponse) -> dict[str, Any]:
    """``response`` as a ``chat.completion`` object, which :func:`parse_completion` reads back
    (how a live answer is kept for a resumed run to replay, :mod:`runner.agent.replay`)."""
    message = Message("assistant", response.content, tool_calls=response.tool_calls).to_openai()
    used = response.usage
    usage = {
        "prompt_tokens": used.input_tokens, "completion_tokens": used.output_tokens,
        "prompt_tokens_details": {"cached_tokens": used.cached_input_tokens, "cache_write_tokens": used.cache_write_tokens},
        "completion_tokens_details": {"reasoning_tokens": used.reasoning_tokens},
    }  # fmt: skip
    tier = {"service_tier": response.service_tier} if response.service_tier else {}
    return {"object": "chat.completion", "model": response.model, "usage": usage, **tier,
            "choices": [{"index": 0, "message": message, "finish_reason": response.finish_reason}]}  # fmt: skip


def parse_usage(usage: object) -> Usage:
    """Read ``prompt_tokens``, ``completion_tokens``, cached prompt tokens (OpenAI's
    ``prompt_tokens_details.cached_tokens``, else DeepSeek's ``prompt_cache_hit_tokens``),
    prompt tokens written to the cache (``prompt_tokens_details.cache_write_tokens``) and
    reasoning tokens (``completion_tokens_details.reasoning_tokens``, part of the completion
    tokens); 0 when absent. A part is never more than its whole."""
    if not isinstance(usage, Mapping):
        return Usage()
    prompt = usage.get("prompt_tokens_details")
    prompt = prompt if isinstance(prompt, Mapping) else {}
    completion = usage.get("completion_tokens_details")
    completion = completion if isinstance(completion, Mapping) else {}
    cached = prompt.get("cached_tokens")
    if cached is None:
        cached = usage.get("prompt_cache_hit_tokens")
    input_tokens, output_tokens = _as_int(usage.get("prompt_tokens")), _as_int(usage.get("completion_tokens"))
    return Usage(
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cached_input_tokens=_as_int(cached),
        reasoning_tokens=min(_as_int(completion.get("reasoning_tokens")), output_tokens),
        cache_write_tokens=min(_as_int(prompt.get("cache_write_tokens")), input_tokens),
    )


@dataclass
class _PartialToolCall:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


@dataclass
class StreamAccumulator:
    """Collects ``chat.completion.chunk`` dicts into one :class:`ModelResponse`.

    Content deltas are concatenated; tool-call deltas are merged by their ``index``
    (the id and name arrive once, the arguments in pieces); the usage chunk sent with
    ``stream_options.include_usage`` (empty ``choices``) fills in the usage.
    """

    chunks: int = 0
    model: str = ""
    finish_reason: str | None = None
    usage: Usage = field(default_factory=Usage)
    _content: list[str] = field(default_factory=list)
    _calls: dict[int, _PartialToolCall] = field(default_factory=dict)

    def add(self, chunk: Mapping[str, Any]) -> None:
        """Merge one decoded chunk."""
        self.chunks += 1
        self.model = str(chunk.get("model") or self.model)
        if chunk.get("usage"):
            self.usage = parse_usage(chunk["usage"])
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, Mapping) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            if isinstance(delta.get("content"), str):
                self._content.append(delta["content"])
            for call in delta.get("tool_calls") or ():
                self._merge_tool_call(call)
            self.finish_reason = choice.get("finish_reason") or self.finish_reason

    def result(self) -> ModelResponse:
        """The accumulated response; raises :class:`InvalidResponse` for an empty stream."""
        if not self.chunks:
            raise InvalidResponse("the stream ended without any chunk")
        calls = tuple(
            _parse_tool_call({"id": c.id, "function": {"name": c.name, "arguments": "".join(c.arguments)}})
            for _, c in sorted(self._calls.items())
        )
        return ModelResponse(
            content=visible_surrogates("".join(self._content)) if self._content else None,
            tool_calls=calls,
            usage=self.usage,
            model=self.model,
            finish_reason=self.finish_reason,
        )

    def _merge_tool_call(self, call: Mapping[str, Any]) -> None:
        partial = self._calls.setdefault(_as_int(call.get("index")), _PartialToolCall())
        partial.id = partial.id or str(call.get("id") or "")
        function = call.get("function") or {}
        partial.name = partial.name or str(function.get("name") or "")
        if function.get("arguments"):
            partial.arguments.append(str(function["arguments"]))


def _parse_tool_call(call: object) -> ToolCall:
    function = call.get("function") if isinstance(call, Mapping) else None
    if not isinstance(call, Mapping) or not isinstance(function, Mapping) or not function.get("name"):
        raise InvalidResponse("a tool call has no function name")
    arguments = function.get("arguments")
    if not isinstance(arguments, str):
        # Some OpenAI-compatible servers send the arguments as an object.
        arguments = json.dumps(arguments if arguments is not None else {})
    return ToolCall(
        id=visible_surrogates(str(call.get("id") or "")),
        name=visible_surrogates(str(function["name"])),
        arguments=visible_surrogates(arguments),
    )


_SURROGATE = re.compile("[\ud800-\udfff]")


def visible_surrogates(text: str) -> str:
    """``text`` with each lone surrogate (JSON may spell one: ``"\\ud800"``) as its escape
    ``\\ud800``: no file, terminal or hash can encode one, and a model's answer or tool call
    holding one used to end the run when its report was written. In tool-call arguments the
    escape is the JSON spelling of the same character, which the tool registry refuses."""
    return _SURROGATE.sub(lambda found: f"\\u{ord(found.group()):04x}", text) if _SURROGATE.search(text) else text


MAX_REPORTED_TOKENS = 1 << 40
"""A token count above this (about 10^12) is not a real call's: read as not reported."""


def as_count(value: object) -> int:
    """A count the endpoint reported; anything but an integer in 0..MAX_REPORTED_TOKENS is 0
    (not reported: the estimate stands), so a made-up count cannot overflow the stores."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_REPORTED_TOKENS:
        return value
    return 0


_as_int = as_count
