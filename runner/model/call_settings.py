"""What one agent sends with every model call, decided once from its ``model:`` block and
its model's profile (:mod:`runner.config.profiles`), so the live path, a provider batch's
JSONL lines, the token estimate and the result cache's fingerprint all build the same body."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from runner.config.profiles import ModelProfile
from runner.config.specs import ModelSpec
from runner.model.base import Message, ModelRequest

STRICT_SCHEMA_NAME = "output"
"""The ``json_schema.name`` of a strict response format (the provider requires one)."""


@dataclass(frozen=True)
class CallSettings:
    """The request fields of one agent's calls besides messages and tools."""

    max_tokens: int
    tokens_field: str = "max_tokens"
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    stop: tuple[str, ...] = ()
    reasoning_effort: str | None = None
    service_tier: str | None = None
    response_format: dict[str, Any] | None = None  # sent on the agent's own turns only (not summaries)
    extra_body: Mapping[str, Any] = field(default_factory=dict)
    prompt_cache_key: str | None = None

    def request(
        self, model_id: str, messages: tuple[Message, ...], *, tools: tuple[dict[str, Any], ...] = (),
        tool_choice: str = "none", structured: bool = False,
    ) -> ModelRequest:
        """The request for one call; ``structured``: with the strict response format, if any."""
        return ModelRequest(
            model=model_id, messages=messages, tools=tools, tool_choice=tool_choice, max_tokens=self.max_tokens,
            temperature=self.temperature, prompt_cache_key=self.prompt_cache_key, tokens_field=self.tokens_field,
            top_p=self.top_p, seed=self.seed, stop=self.stop, reasoning_effort=self.reasoning_effort,
            service_tier=self.service_tier, response_format=self.response_format if structured else None,
            extra_body=self.extra_body,
        )  # fmt: skip


def call_settings(
    spec: ModelSpec, profile: ModelProfile, output_schema: Mapping[str, Any] | None = None, prompt_cache_key: str | None = None,
) -> CallSettings:
    """``spec``'s settings as ``profile`` takes them: its tokens field; a strict response format
    when ``model.structured_output`` is ``auto``, there is an output schema, the profile supports
    strict JSON Schema output and the schema is in the strict subset (else none is sent and the
    answer is checked and repaired as before). A setting the profile does not take is left out:
    ``runner validate`` refuses it for the agent's own model id, so this only happens to a
    model given by ``--model``, and the run says so (:func:`runner.runs.steps.preflight_prices`)."""
    response_format = None
    if spec.structured_output == "auto" and output_schema is not None and profile.strict_json_schema:
        response_format = strict_response_format(output_schema)
    return CallSettings(
        max_tokens=spec.max_tokens, tokens_field=profile.tokens_field,
        temperature=spec.temperature if profile.temperature else None, top_p=spec.top_p if profile.top_p else None,
        seed=spec.seed, stop=spec.stop,
        reasoning_effort=spec.reasoning_effort if spec.reasoning_effort in profile.reasoning_efforts else None,
        service_tier=spec.service_tier if spec.service_tier in profile.service_tiers else None,
        response_format=response_format, extra_body=dict(spec.extra_body), prompt_cache_key=prompt_cache_key,
    )  # fmt: skip


def strict_response_format(schema: Mapping[str, Any]) -> dict[str, Any] | None:
    """``{"type": "json_schema", "json_schema": {name, strict: true, schema}}`` for ``schema``,
    or ``None`` when ``schema`` is outside the strict subset the providers take (every object
    closed with ``additionalProperties: false`` and listing all its properties as required,
    an object at the root, no keyword strict mode rejects)."""
    if schema.get("type") != "object" or not _strict_subset(schema):
        return None
    return {"type": "json_schema", "json_schema": {"name": STRICT_SCHEMA_NAME, "strict": True, "schema": dict(schema)}}


_UNSUPPORTED = frozenset({
    "patternProperties", "unevaluatedProperties", "propertyNames", "minProperties", "maxProperties",
    "if", "then", "else", "dependentRequired", "dependentSchemas", "contains", "not", "oneOf", "allOf",
})  # fmt: skip
"""Keywords OpenAI's strict mode refuses (its documented subset supports anyOf, not oneOf/allOf/not)."""


def _strict_subset(node: object) -> bool:
    if isinstance(node, list):
        return all(_strict_subset(item) for item in node)
    if not isinstance(node, Mapping):
        return True
    if _UNSUPPORTED & node.keys():
        return False
    properties = node.get("properties")
    if node.get("type") == "object" or isinstance(properties, Mapping):
        names = set(properties or {})
        if node.get("additionalProperties") is not False or set(node.get("required") or ()) != names:
            return False
    return all(_strict_subset(value) for key, value in node.items() if key not in ("enum", "const", "default", "examples"))
