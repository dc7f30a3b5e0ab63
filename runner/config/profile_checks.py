"""``runner validate`` (and a run's preflight, after ``--model``) refuses a ``model:`` setting
the model's profile does not accept, and any way of sending a key besides ``api_key_env``.

Each problem is located at the setting (``/model/temperature``, ``/model/extra_headers/<name>``)
and says what the profile accepts instead: a 400 from the provider on the first row of a batch
becomes an error before anything is sent.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from typing import Any

from runner.config.documents import Document, escape_pointer_token
from runner.config.prices import find_price, priority_price
from runner.config.profiles import ModelProfile
from runner.config.specs import AgentSpec, ModelSpec, Price
from runner.errors import Problem, did_you_mean

KEY_HEADERS = frozenset({"authorization", "proxy-authorization", "api-key", "x-api-key"})
"""Headers that carry a key: the client sends the key from ``api_key_env``, never from YAML."""

RUNNER_FIELDS = frozenset({
    "model", "messages", "tools", "tool_choice", "max_tokens", "max_completion_tokens", "temperature", "top_p",
    "seed", "stop", "reasoning_effort", "service_tier", "response_format", "prompt_cache_key", "stream",
    "stream_options",
})  # fmt: skip
"""Body fields runner sets itself (from ``model:`` settings), so ``extra_body`` may not."""

KEY_VARIABLES = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "AZURE_OPENAI_API_KEY")
"""The providers' standard key variables, whose values are known keys."""

MIN_KEY_CHARS = 8
"""Shorter values are not compared with keys (a short header value equal to a test key is noise)."""


def check_model_settings(
    doc: Document, spec: ModelSpec, profile: ModelProfile, model_id: str | None = None,
    environ: Mapping[str, str] | None = None, *, at: str = "/model",
) -> list[Problem]:
    """Every setting of ``spec`` (an agent's ``model:``, or its ``fallback_model:`` with ``at``)
    that ``profile`` refuses, and every key in ``extra_headers`` / ``extra_body``. ``model_id``:
    the id called (``--model``), default the spec's."""
    field = at.lstrip("/")
    refused = refused_settings(spec, profile, model_id, field=field)
    problems = [doc.problem(f"{at}/{name}", message) for name, message in refused]
    problems += key_problems(doc, spec, environ, at=at)
    return problems


def key_problems(doc: Document, spec: ModelSpec, environ: Mapping[str, str] | None = None, *, at: str = "/model") -> list[Problem]:
    """Every key in ``spec``'s ``extra_headers`` / ``extra_body``, and every field of runner's own there."""
    return _key_problems(doc, spec, _known_keys(spec, os.environ if environ is None else environ), at)


def check_tier_price(
    doc: Document, agent: AgentSpec, profile: ModelProfile, prices: Mapping[str, Price], *, at: str = "/model"
) -> list[Problem]:
    """A money-capped agent at a tier billed, or reserved (its ``tier_fallback``), at priority rates
    needs them in its price (``at``: its ``/model``, or its ``/fallback_model``)."""
    spec = agent.fallback_model if at == "/fallback_model" else agent.model
    if spec is None or agent.caps.max_cost_usd is None or profile.reserved_billing(spec.service_tier) != "priority":
        return []
    price = find_price(dict(prices), spec.id)
    if price is None or priority_price(price) is not None:
        return []  # no price at all is reported at /caps/max_cost_usd
    fallback = "" if profile.tier_billing(spec.service_tier) == "priority" else f" (served at its tier_fallback '{profile.tier_fallback.get(str(spec.service_tier))}')"
    return [doc.problem(f"{at}/service_tier", (
        f"service_tier '{spec.service_tier}'{fallback} bills model '{spec.id}' at priority rates, which its price does not give, so "
        "max_cost_usd cannot be enforced; add priority_input_per_mtok and priority_output_per_mtok to its kind: Prices entry"
    ))]  # fmt: skip


def refused_settings(
    spec: ModelSpec, profile: ModelProfile, model_id: str | None = None, *, field: str = "model"
) -> list[tuple[str, str]]:
    """``(setting, message)`` for each setting of ``spec`` (the agent's ``field``) ``profile`` does not accept."""
    return list(_refused(spec, profile, f"model '{model_id or spec.id}' (profile '{profile.name}')", field))


def _refused(spec: ModelSpec, profile: ModelProfile, who: str, field: str) -> Iterator[tuple[str, str]]:
    for name, allowed in (("temperature", profile.temperature), ("top_p", profile.top_p)):
        if getattr(spec, name) is not None and not allowed:
            yield name, (f"{who} does not accept {name} (the provider answers 400); remove {field}.{name}, "
                         f"or name another profile in {field}.profile")  # fmt: skip
    effort = spec.reasoning_effort
    if effort is not None and effort not in profile.reasoning_efforts:
        if profile.reasoning_efforts:
            yield "reasoning_effort", (f"'{effort}' is not a reasoning effort of {who}: use one of "
                                       f"{', '.join(profile.reasoning_efforts)}{did_you_mean(effort, profile.reasoning_efforts)}")
        else:
            yield "reasoning_effort", f"{who} takes no reasoning_effort; remove it, or name a reasoning profile in {field}.profile"
    tier = spec.service_tier
    if tier is not None and tier not in profile.service_tiers:
        offered = f"use one of {', '.join(profile.service_tiers)}" if profile.service_tiers else f"remove {field}.service_tier"
        yield "service_tier", f"{who} has no service tier '{tier}'; {offered}"


def _known_keys(spec: ModelSpec, environ: Mapping[str, str]) -> dict[str, str]:
    """Key value -> the variable holding it, for every key variable this agent could use."""
    names = [*KEY_VARIABLES, *([spec.api_key_env] if spec.api_key_env else [])]
    return {value: name for name in names if len(value := environ.get(name, "")) >= MIN_KEY_CHARS}


def _key_problems(doc: Document, spec: ModelSpec, keys: Mapping[str, str], at: str) -> list[Problem]:
    problems: list[Problem] = []
    field = at.lstrip("/")
    for name, value in spec.extra_headers.items():
        pointer = f"{at}/extra_headers/{escape_pointer_token(name)}"
        if name.lower() in KEY_HEADERS:
            problems.append(doc.problem(pointer, f"header '{name}' carries the API key, which is never written in YAML; "
                                        f"name the variable that holds it in {field}.api_key_env", key=True))  # fmt: skip
        elif value in keys:
            problems.append(doc.problem(pointer, _key_value_message(keys[value], field)))
    for name in spec.extra_body:
        if name in RUNNER_FIELDS:
            problems.append(doc.problem(f"{at}/extra_body/{escape_pointer_token(name)}", (
                f"runner sets '{name}' itself (from the {field}: settings and the model's profile); set it there, not in extra_body"
            ), key=True))  # fmt: skip
    problems += [doc.problem(pointer, _key_value_message(keys[value], field)) for pointer, value in _strings(spec.extra_body, f"{at}/extra_body") if value in keys]
    return problems


def _key_value_message(variable: str, field: str) -> str:
    return f"this value is the API key in ${variable}; a key is never written in YAML: name its variable in {field}.api_key_env"


def _strings(node: Any, pointer: str) -> Iterator[tuple[str, str]]:
    """``(pointer, text)`` of every string in a JSON value (keys' values, list items)."""
    if isinstance(node, str):
        yield pointer, node
    elif isinstance(node, Mapping):
        for key, value in node.items():
            yield from _strings(value, f"{pointer}/{escape_pointer_token(str(key))}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _strings(value, f"{pointer}/{index}")
