"""What OpenAI's Chat Completions API refuses, for the loopback server (:mod:`runner.model.server`).

Two layers, both answering a 400 in the real API's error shape
(``{"error": {"message", "type": "invalid_request_error", "param", "code"}}``):

- :func:`conformance_error`, always on: the body must be a ``CompletionCreateParams`` as the
  ``openai`` package's request types (generated from OpenAI's OpenAPI specification) define
  it, checked with pydantic; its messages and tools too (the types declare them as
  ``Iterable``, which pydantic does not walk); no field the specification does not have
  ("Unrecognized request argument supplied: ..."). So every body the test suite sends,
  live or in a batch line, is checked against the provider's own definitions.
- :func:`model_error`, in strict mode (``ScriptedServer(strict=True)``): what the API refuses
  per model, as documented and as it answers: ``max_tokens``, ``temperature`` and ``top_p``
  on reasoning models (o-series, GPT-5 family), ``reasoning_effort`` on others, the flex tier
  outside the models that have it.

Imports pydantic and the openai types on first use (the server only, never a run).
"""

from __future__ import annotations

import re
import typing
from collections.abc import Mapping
from functools import cache
from typing import Any

REASONING_MODELS = re.compile(r"^(o1|o3|o4|gpt-5)")
"""Model ids (after any ``provider/`` prefix) of OpenAI's reasoning models."""

FLEX_MODELS = re.compile(r"^(o3|o4-mini|gpt-5)")
"""Models with the flex processing tier (OpenAI's flex processing guide)."""


def api_error(message: str, param: str | None, code: str | None) -> dict[str, Any]:
    """An error body as the API sends it."""
    return {"error": {"message": message, "type": "invalid_request_error", "param": param, "code": code}}


FLEX_UNAVAILABLE: dict[str, Any] = {"error": {
    "message": "Resource Unavailable: flex processing has no capacity for this request now; retry later, or send it "
               "with service_tier 'default'. You are not charged for this request.",
    "type": "rate_limit_error", "param": None, "code": "resource_unavailable",
}}  # fmt: skip
"""The 429 body a flex request gets when flex processing cannot serve it (OpenAI's flex guide:
"429 Resource Unavailable", not billed, never served at the default tier instead)."""


def conformance_error(body: Mapping[str, Any]) -> dict[str, Any] | None:
    """The API's 400 for a body the specification does not allow, else ``None``."""
    from pydantic import ValidationError

    unknown = sorted(set(body) - _top_level_fields())
    if unknown:
        return api_error(f"Unrecognized request argument supplied: {unknown[0]}", None, None)
    adapters = _adapters()
    parts: list[tuple[str, Any, Any]] = [("", adapters["body"], dict(body))]
    parts += [("messages", adapters["messages"], list(body.get("messages") or ()))]
    if "tools" in body:
        parts.append(("tools", adapters["tools"], body["tools"]))
    for prefix, adapter, value in parts:
        try:
            adapter.validate_python(value, strict=False)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = _param(((prefix,) if prefix else ()) + tuple(first["loc"]))
            return api_error(f"Invalid value for '{where}': {first['msg']}", where or None, "invalid_value")
    for index, message in enumerate(body.get("messages") or ()):
        extra = sorted(set(message) - _message_fields(str(message.get("role"))))
        if extra:
            return api_error(f"Unrecognized request argument supplied: messages[{index}].{extra[0]}", f"messages[{index}]", None)
    return None


def model_error(body: Mapping[str, Any]) -> dict[str, Any] | None:
    """The API's 400 for a parameter the body's model does not take, else ``None``."""
    model = str(body.get("model") or "").rsplit("/", 1)[-1]
    if REASONING_MODELS.match(model):
        if "max_tokens" in body:
            return api_error(
                "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.",
                "max_tokens", "unsupported_parameter",
            )
        for name in ("temperature", "top_p"):
            if name in body and body[name] != 1:
                return api_error(
                    f"Unsupported value: '{name}' does not support {body[name]} with this model. Only the default (1) value is supported.",
                    name, "unsupported_value",
                )
    elif "reasoning_effort" in body:
        return api_error("Unsupported parameter: 'reasoning_effort' is not supported with this model.", "reasoning_effort", "unsupported_parameter")
    if body.get("service_tier") == "flex" and not FLEX_MODELS.match(model):
        return api_error(f"Flex is not available for this model: {model}.", "service_tier", "unsupported_value")
    return None


def _param(loc: tuple[Any, ...]) -> str:
    """A pydantic error location as the API names a parameter (``messages[0].role``): list
    indexes in brackets, the union members pydantic tried (class names) left out."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif not (part[:1].isupper() or "[" in part):
            out += f".{part}" if out else part
    return out


@cache
def _top_level_fields() -> frozenset[str]:
    from openai.types.chat.completion_create_params import CompletionCreateParamsBase

    return frozenset(typing.get_type_hints(CompletionCreateParamsBase)) | {"stream"}


@cache
def _message_fields(role: str) -> frozenset[str]:
    from openai.types.chat import ChatCompletionMessageParam

    for kind in typing.get_args(ChatCompletionMessageParam):
        hints = typing.get_type_hints(kind)
        if role in typing.get_args(typing.get_args(hints["role"])[0]) or role in typing.get_args(hints["role"]):
            return frozenset(hints)
    return frozenset({"role"})


@cache
def _adapters() -> dict[str, Any]:
    from openai.types.chat import ChatCompletionMessageParam, ChatCompletionToolUnionParam
    from openai.types.chat.completion_create_params import CompletionCreateParams
    from pydantic import TypeAdapter

    return {
        "body": TypeAdapter(CompletionCreateParams),
        "messages": TypeAdapter(list[ChatCompletionMessageParam]),
        "tools": TypeAdapter(list[ChatCompletionToolUnionParam]),
    }
