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
from dataclasses import dataclass, field

from runner.config.prices import LOCAL_MODEL_ID
from runner.config.specs import ModelSpec
from runner.errors import ConfigError
from runner.model.base import ChatModel

LOCAL_NOTICE = (
    "no model endpoint configured: using the embedded model ({model}, offline, 0 USD; it writes prose but "
    "cannot drive tools). To use a real endpoint: export OPENAI_API_KEY=... (and OPENAI_BASE_URL, or --base-url URL)"
)


@dataclass(frozen=True)
class Endpoint:
    """Where one agent's calls go. ``api_key`` is never logged or stored."""

    provider: str  # openai | local
    model_id: str
    base_url: str | None = None
    api_key: str | None = field(default=None, repr=False)


def resolve_endpoint(
    spec: ModelSpec,
    *,
    model_override: str | None = None,
    base_url_override: str | None = None,
    api_key: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> Endpoint:
    """Decide provider, model id, base URL and key for one agent."""
    env = os.environ if environ is None else environ
    model_id = model_override or spec.id
    if spec.provider == "local":
        return Endpoint("local", LOCAL_MODEL_ID)
    base_url = base_url_override or spec.base_url or env.get("OPENAI_BASE_URL") or None
    key = api_key
    if key is None and spec.api_key_env:
        key = env.get(spec.api_key_env) or None
    if key is None:
        key = env.get("OPENAI_API_KEY") or None
    if spec.provider == "auto" and base_url is None and key is None:
        return Endpoint("local", LOCAL_MODEL_ID)
    if key is None and base_url is None:
        raise ConfigError(
            f"model '{model_id}': no API key found; set {spec.api_key_env or 'OPENAI_API_KEY'} "
            "or give base_url for a local OpenAI-compatible server"
        )
    return Endpoint("openai", model_id, base_url, key or "not-needed")


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
    ):
        """``fixed``: answer every agent with this model (e.g. a ``ScriptedModel`` in tests)."""
        self._models: dict[tuple[object, ...], ChatModel] = {}
        self.fixed = fixed
        self._on_retry = on_retry
        self._notice = notice
        self._noticed = False

    def endpoint(
        self, spec: ModelSpec, model_override: str | None, base_url_override: str | None, api_key: str | None
    ) -> Endpoint:
        """Where an agent's calls go; with a ``fixed`` model, that model under the agent's model id
        (so prices and records name the model the agent asked for)."""
        if self.fixed is not None:
            return Endpoint("fixed", model_override or spec.id)
        return resolve_endpoint(
            spec, model_override=model_override, base_url_override=base_url_override, api_key=api_key
        )

    def get(self, endpoint: Endpoint, spec: ModelSpec) -> ChatModel:
        if self.fixed is not None:
            return self.fixed
        key_hash = hashlib.sha256((endpoint.api_key or "").encode()).hexdigest()[:16]
        cache_key = (endpoint.provider, endpoint.model_id, endpoint.base_url, key_hash, spec.timeout_seconds, spec.retries)
        if cache_key not in self._models:
            self._models[cache_key] = self._build(endpoint, spec)
        return self._models[cache_key]

    def _build(self, endpoint: Endpoint, spec: ModelSpec) -> ChatModel:
        if endpoint.provider == "local":
            from runner.model.local import LocalChatModel

            if self._notice and not self._noticed:
                self._noticed = True
                self._notice(LOCAL_NOTICE.format(model=endpoint.model_id))
            return LocalChatModel()
        from runner.model.openai_client import OpenAIChatModel

        return OpenAIChatModel(
            endpoint.model_id,
            base_url=endpoint.base_url,
            api_key=endpoint.api_key,
            timeout_seconds=spec.timeout_seconds,
            max_retries=spec.retries,
            on_retry=self._on_retry,
        )

    async def aclose(self) -> None:
        for model in self._models.values():
            await model.aclose()
        self._models.clear()
