"""Choosing and building the model client for an agent.

Resolution, most specific first: the CLI's ``--base-url`` / ``--model``, the agent's
``model:`` block, then the SDK's standard ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY``. With
``provider: auto`` (the default) and no endpoint configured at all, the embedded local model
is used, and the caller is told so once.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Protocol

from runner.config.prices import LOCAL_MODEL_ID
from runner.config.specs import ModelSpec
from runner.core.providers import Provider
from runner.endpoints import (
    DEFAULT_BASE_URL,
    STANDARD_KEY_VARIABLES,
    KeyCandidate,
    choose_key,
    home_of_standard,
    safe_url,
    same_endpoint,
    standard_endpoint,
)
from runner.errors import ConfigError, Problem
from runner.model.base import ChatModel
from runner.model.endpoint import Endpoint, KeyRefused, check_base_url

if TYPE_CHECKING:
    from runner.config.project import Project
    from runner.config.specs import TaskSpec

LOCAL_NOTICE = (
    "no model endpoint configured: using the embedded model ({model}, offline, 0 USD; it writes prose but "
    "cannot drive tools). To use a real endpoint: export OPENAI_API_KEY=... (and OPENAI_BASE_URL, or --base-url URL)"
)


class BatchTransport(Protocol):
    """Sends an endpoint's calls through its provider's Batch API (``--via batch-api``;
    :mod:`runner.batch.round_model`), ``live`` being the same endpoint called directly."""

    def model(self, endpoint: Endpoint, live: ChatModel) -> ChatModel: ...


def resolve_endpoint(
    spec: ModelSpec,
    *,
    model_override: str | None = None,
    base_url_override: str | None = None,
    api_key: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> Endpoint:
    """Decide provider, model id, base URL, key and headers (``model.extra_headers``) for one agent.

    The key is one that belongs to the chosen endpoint (see :mod:`runner.endpoints`);
    an agent whose own ``base_url`` would receive another endpoint's key is refused.
    """
    endpoint = _resolve(spec, model_override, base_url_override, api_key, os.environ if environ is None else environ)
    return replace(endpoint, headers=tuple(sorted(spec.extra_headers.items())))


def _resolve(
    spec: ModelSpec, model_override: str | None, base_url_override: str | None, api_key: str | None, env: Mapping[str, str]
) -> Endpoint:
    model_id = model_override or spec.id
    if spec.provider is Provider.LOCAL:
        return Endpoint(Provider.LOCAL, LOCAL_MODEL_ID)
    if spec.provider is Provider.ANTHROPIC or spec.provider is Provider.AZURE:
        from runner.model.native_endpoints import resolve_native

        return _header_checked(resolve_native(spec, model_id, base_url_override, api_key, env), spec.api_key_env or "the key")
    base_url = base_url_override or spec.base_url or env.get("OPENAI_BASE_URL") or None
    if base_url is not None:
        check_base_url(base_url, _base_url_setting(spec, base_url_override))
    target = base_url or DEFAULT_BASE_URL
    candidates = _key_candidates(spec, base_url_override, api_key, env)
    key, withheld = choose_key(target, candidates)
    if key is None and withheld:  # sending none could hide the mistake behind a 401; one would leak
        raise KeyRefused(spec, *_refusal(spec, target, standard_endpoint(base_url_override, env), withheld))
    if spec.provider is None and base_url is None and key is None:
        return Endpoint(Provider.LOCAL, LOCAL_MODEL_ID)
    if key is None and base_url is None:
        raise ConfigError(
            f"model '{model_id}': no API key found; set {spec.api_key_env or 'OPENAI_API_KEY'} "
            "or give base_url for a local OpenAI-compatible server"
        )
    if key is not None and not _header_safe(key):
        source = next(c.name for c in candidates if c.value == key)
        raise _header_refused(model_id, source)
    return Endpoint(Provider.OPENAI, model_id, base_url, key or "not-needed")


def _header_refused(model_id: str, source: str) -> ConfigError:
    return ConfigError(
        f"model '{model_id}': {source} holds a character an HTTP header cannot carry (a space or line break, "
        "maybe at its end, a control or a non-ASCII character); set it to the key alone"
    )


def _header_checked(endpoint: Endpoint, source: str) -> Endpoint:
    if endpoint.api_key is not None and not _header_safe(endpoint.api_key):
        raise _header_refused(endpoint.model_id, source)
    return endpoint


def _header_safe(key: str) -> bool:
    """Whether ``key`` can go in an ``Authorization`` header as it is: printable ASCII, no spaces
    (a key read from a file often ends in a newline: sent, it fails every call after retries)."""
    return key.isascii() and all(33 <= ord(c) <= 126 for c in key)


def _base_url_setting(spec: ModelSpec, base_url_override: str | None) -> str:
    """Where the base URL in use was set, for an error message."""
    if base_url_override:
        return "--base-url"
    if spec.base_url:
        return f"{spec.source}: /model/base_url" if spec.source else "model.base_url"
    return "$OPENAI_BASE_URL"


def check_endpoints(
    project: Project,
    task: TaskSpec,
    *,
    model_override: str | None = None,
    base_url_override: str | None = None,
    api_key: str | None = None,
) -> None:
    """Resolve the endpoint of every agent ``task`` may run before anything starts, so a key
    that would go to the wrong endpoint refuses the run or batch (exit 2), nothing recorded."""
    problems: list[Problem] = []
    for name in task.agents_used():
        agent = project.agents.get(name)
        if agent is None:
            continue
        try:
            resolve_endpoint(agent.model, model_override=model_override, base_url_override=base_url_override, api_key=api_key)
        except KeyRefused as refused:
            document = project.documents.get(("Agent", name))
            located = document.problem(refused.pointer, refused.message) if document else refused.problems[0]
            problems.append(located)
    if problems:
        raise ConfigError(problems)


def _key_candidates(
    spec: ModelSpec, base_url_override: str | None, api_key: str | None, env: Mapping[str, str]
) -> list[KeyCandidate]:
    """The keys that could be sent, most specific first, each with the endpoint it belongs to."""
    standard = standard_endpoint(base_url_override, env)
    candidates = [KeyCandidate(api_key, standard, "the API key given by the caller (e.g. an Airflow connection)")]
    variable = spec.api_key_env
    if variable:
        home = home_of_standard(variable, env, base_url_override)  # a provider's standard key stays with its provider
        own_home = home if home is not None else spec.base_url or standard
        candidates.append(KeyCandidate(env.get(variable), own_home, variable))
    candidates += [KeyCandidate(env.get(name), standard, name) for name in STANDARD_KEY_VARIABLES]
    return candidates


def _refusal(spec: ModelSpec, target: str, standard: str, withheld: list[str]) -> tuple[str, str]:
    """``(pointer, message)``: why no key is sent to ``target``, and how to fix it."""
    names = " and ".join(withheld)
    shown, variable = safe_url(target), spec.api_key_env
    if not same_endpoint(target, standard):
        if variable in STANDARD_KEY_VARIABLES:
            fix = f"name another variable in model.api_key_env ({variable} is a standard variable)"
        elif variable:
            fix = f"set {variable} (named by model.api_key_env) to the key for {shown}"
        else:
            fix = f"set model.api_key_env to the name of a variable holding the key for {shown}"
        return "/model/base_url", (
            f"{shown} is not the standard endpoint ({safe_url(standard)}), so {names} is not sent to it. "
            f"To fix: {fix}; or remove model.base_url to use the standard endpoint"
        )
    own = safe_url(spec.base_url or standard)
    return "/model/api_key_env", (
        f"{names} belongs to this agent's model.base_url {own}, not to {shown} (--base-url or the connection's "
        f"host), so it is not sent there. To fix: set OPENAI_API_KEY (or give the connection a password) for "
        f"{shown}, or drop the override"
    )


class ModelPool:
    """Model clients shared by the runs of one process (e.g. all rows of a batch).

    Clients hold connection pools; usage accounting lives in budgets and the run store,
    never in a client, so sharing one between agents mixes nothing.
    """

    def __init__(
        self,
        on_retry: Callable[[str, int, float], None] | None = None,
        notice: Callable[[str], None] | None = None,
        fixed: ChatModel | None = None,
        batch: BatchTransport | None = None,
    ):
        """``fixed``: answer every agent with this model (e.g. a ``ScriptedModel`` in tests);
        ``batch``: send the calls to OpenAI-compatible endpoints through their Batch API."""
        self._models: dict[tuple[object, ...], ChatModel] = {}
        # An agent's endpoint, decided once per factory (a batch's rows ask for it several times each):
        # keyed by the spec's identity, which the entry keeps alive, and the overrides.
        self._endpoints: dict[tuple[int, str | None, str | None, str | None], tuple[ModelSpec, Endpoint]] = {}
        self.fixed = fixed
        self.batch = batch
        self._on_retry = on_retry
        self._notice = notice
        self._noticed = False

    def endpoint(
        self, spec: ModelSpec, model_override: str | None, base_url_override: str | None, api_key: str | None
    ) -> Endpoint:
        """Where an agent's calls go; with a ``fixed`` model, that model under the agent's model id
        (so prices and records name the model the agent asked for)."""
        if self.fixed is not None:
            return Endpoint(Provider.FIXED, model_override or spec.id)
        key = (id(spec), model_override, base_url_override, api_key)
        known = self._endpoints.get(key)
        if known is not None and known[0] is spec:
            return known[1]
        endpoint = resolve_endpoint(
            spec, model_override=model_override, base_url_override=base_url_override, api_key=api_key
        )
        if self.batch is not None and endpoint.provider.has_batch_api:
            endpoint = replace(endpoint, tariff="batch")
        self._endpoints[key] = (spec, endpoint)
        return endpoint

    def get(self, endpoint: Endpoint, spec: ModelSpec) -> ChatModel:
        if self.fixed is not None:
            return self.fixed
        key_hash = hashlib.sha256((endpoint.api_key or "").encode()).hexdigest()[:16]
        cache_key = (
            endpoint.provider, endpoint.model_id, endpoint.base_url, key_hash, spec.timeout_seconds, spec.retries, endpoint.tariff,
            endpoint.deployment, endpoint.api_version, endpoint.headers,
        )
        if cache_key not in self._models:
            self._models[cache_key] = self._build(endpoint, spec)
        return self._models[cache_key]

    def _build(self, endpoint: Endpoint, spec: ModelSpec) -> ChatModel:
        if endpoint.tariff == "batch" and self.batch is not None:
            return self.batch.model(endpoint, self.get(replace(endpoint, tariff="live"), spec))
        if endpoint.provider is Provider.LOCAL:
            from runner.model.local import LocalChatModel

            if self._notice and not self._noticed:
                self._noticed = True
                self._notice(LOCAL_NOTICE.format(model=endpoint.model_id))
            return LocalChatModel()
        if endpoint.provider is Provider.ANTHROPIC:
            from runner.model.anthropic_client import AnthropicChatModel

            return AnthropicChatModel(
                endpoint.model_id, base_url=endpoint.base_url, api_key=endpoint.api_key,
                timeout_seconds=spec.timeout_seconds, max_retries=spec.retries, on_retry=self._on_retry,
                default_headers=dict(endpoint.headers),  # model.extra_headers (no key: config/profile_checks.py)
            )  # fmt: skip
        from runner.model.openai_client import OpenAIChatModel

        if endpoint.provider is Provider.AZURE:
            return OpenAIChatModel(
                endpoint.model_id, azure=(endpoint.deployment or endpoint.model_id, endpoint.api_version or ""),
                base_url=endpoint.base_url, api_key=endpoint.api_key, timeout_seconds=spec.timeout_seconds,
                max_retries=spec.retries, on_retry=self._on_retry, default_headers=dict(endpoint.headers),
            )  # fmt: skip
        return OpenAIChatModel(
            endpoint.model_id,
            base_url=endpoint.base_url,
            api_key=endpoint.api_key,
            timeout_seconds=spec.timeout_seconds,
            max_retries=spec.retries,
            default_headers=dict(endpoint.headers),  # model.extra_headers (no key: config/profile_checks.py)
            on_retry=self._on_retry,
        )

    async def aclose(self) -> None:
        for model in self._models.values():
            await model.aclose()
        self._models.clear()
