"""Which API an agent's model is called through: one :class:`Provider` per wire protocol.

A provider is a type, never a string to compare: code asks ``endpoint.provider is
Provider.LOCAL`` or reads a property (``remote``, ``has_batch_api``); what each provider is, is said here once. Which model family behaves how (tokens field, temperature,
reasoning effort, tiers, batch limits) is the model's profile (:mod:`runner.config.profiles`).
"""

from __future__ import annotations

from enum import StrEnum

from runner.endpoints import ANTHROPIC_KEYS, AZURE_KEYS, OPENAI_KEYS, ProviderKeys


class Provider(StrEnum):
    """How a model is reached. ``openai``: any OpenAI-compatible Chat Completions endpoint
    (OpenAI itself, vLLM, Ollama, llama.cpp's server, DeepSeek, ...); ``azure``: Azure OpenAI
    (deployments, ``api-version``, the ``api-key`` header); ``anthropic``: the native Messages
    API; ``local``: the embedded model, in process; ``fixed``: a model handed to the model
    pool by a caller (tests, the Python API), never named in configuration."""

    OPENAI = "openai"
    AZURE = "azure"
    ANTHROPIC = "anthropic"
    LOCAL = "local"
    FIXED = "fixed"

    @property
    def remote(self) -> bool:
        """Whether calls leave the process (so they are priced, keyed and may be batched)."""
        return self not in (Provider.LOCAL, Provider.FIXED)

    @property
    def has_batch_api(self) -> bool:
        """Whether runner sends this provider's calls through a Batch API (a model's profile says
        which flavour and its limits, and may still say ``batch_api: null``). Azure OpenAI's batch
        deployments are not spoken here: its calls run live, or at ``service_tier: flex``."""
        return self in (Provider.OPENAI, Provider.ANTHROPIC)

    @property
    def configurable(self) -> bool:
        """Whether an agent's ``model.provider`` may name it."""
        return self is not Provider.FIXED

    @property
    def standard_keys(self) -> ProviderKeys | None:
        """Its standard key and endpoint variables (``None``: a provider without a key)."""
        return {Provider.OPENAI: OPENAI_KEYS, Provider.AZURE: AZURE_KEYS, Provider.ANTHROPIC: ANTHROPIC_KEYS}.get(self)


AUTO = "auto"
"""``model.provider: auto`` (the default): ``openai`` when an endpoint is configured, else ``local``."""


def declared_provider(value: str | None) -> Provider | None:
    """The provider an agent's YAML names, ``None`` for ``auto`` (resolved per run)."""
    return None if value in (None, AUTO) else Provider(value)


def no_batch_api_message(what: str) -> str:
    """Why ``what`` (e.g. "its agent 'triage' uses the embedded local model") cannot go through
    ``--via batch-api``, and what to use instead: the one refusal every provider and profile
    without a Batch API gives."""
    return (
        f"{what}, which has no Batch API; run it live (--via live), or, on an OpenAI model whose profile "
        "has the flex tier, live at batch prices with model.service_tier: flex"
    )
