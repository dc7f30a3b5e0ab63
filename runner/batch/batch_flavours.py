"""Which Batch API an endpoint speaks under ``--via batch-api``, and how much one batch may hold.

The flavour follows the provider (:class:`~runner.core.providers.Provider`): ``openai``
speaks OpenAI's Files + Batches (``/v1/files``, ``/v1/batches``), ``anthropic`` Anthropic's
Message Batches (``/v1/messages/batches``). The limits are the model profile's
(:mod:`runner.config.profiles`: OpenAI 50,000 requests and 200 MB per batch, Anthropic 100,000
and 256 MB), when its flavour is the provider's (a ``claude-*`` id behind an OpenAI-compatible
proxy batches the OpenAI way, at OpenAI's limits); a task's ``batch_api:`` block, or
``--batch-max-requests`` / ``--batch-max-file-bytes``, may only lower them. A provider or
profile without a Batch API is refused before anything is sent
(:func:`~runner.core.providers.no_batch_api_message`).
"""

from __future__ import annotations

from dataclasses import dataclass

from runner.batch.message_batches import MessageBatchesClient
from runner.batch.provider_api import ProviderClient
from runner.config.profiles import BatchApiProfile, ModelProfile
from runner.config.specs import BatchApiLimits
from runner.core.providers import Provider
from runner.model.endpoint import Endpoint

BatchClient = ProviderClient | MessageBatchesClient
"""The Batch API of one endpoint (both flavours have the same methods)."""

FLAVOURS = {Provider.OPENAI: "openai", Provider.ANTHROPIC: "anthropic"}
"""The Batch API each provider speaks (Azure OpenAI's global-batch deployments are not spoken yet)."""
DEFAULT_LIMITS = {
    "openai": BatchApiLimits(max_requests=50_000, max_file_bytes=200_000_000),
    "anthropic": BatchApiLimits(max_requests=100_000, max_file_bytes=256_000_000),
}


@dataclass(frozen=True)
class BatchTarget:
    """An endpoint a task's provider batches go to, with its Batch API (flavour and limits)."""

    endpoint: Endpoint
    api: BatchApiProfile


def batch_target(endpoint: Endpoint, profile: ModelProfile) -> BatchTarget | None:
    """``endpoint``'s Batch API under ``profile``, or ``None`` when it has none."""
    flavour = FLAVOURS.get(endpoint.provider)
    if flavour is None or profile.batch_api is None:
        return None
    if profile.batch_api.flavour != flavour:  # the profile describes the family's own provider, not this one
        return BatchTarget(endpoint, BatchApiProfile(flavour, DEFAULT_LIMITS[flavour]))  # type: ignore[arg-type]
    return BatchTarget(endpoint, profile.batch_api)


def batch_client(endpoint: Endpoint) -> BatchClient:
    """The Batch API client for ``endpoint``'s provider."""
    if endpoint.provider is Provider.ANTHROPIC:
        return MessageBatchesClient(endpoint)
    return ProviderClient(endpoint)


def split_limits(api: BatchApiProfile, asked: BatchApiLimits | None) -> tuple[int, int]:
    """``(requests, bytes)`` one batch may hold: the profile's limits, lowered by what the task
    or the flags ask."""
    most = DEFAULT_LIMITS[api.flavour]
    requests = api.limits.max_requests or most.max_requests or 1
    size = api.limits.max_file_bytes or most.max_file_bytes or 1
    if asked is not None:
        requests = min(requests, asked.max_requests or requests)
        size = min(size, asked.max_file_bytes or size)
    return requests, size


def split(sizes: list[int], max_requests: int, max_bytes: int) -> list[range]:
    """The batches a round's requests (``sizes``: each one's bytes, none larger than
    ``max_bytes``) go out in, in order: as few as the limits allow."""
    parts: list[range] = []
    start, size = 0, 0
    for index, length in enumerate(sizes):
        if index > start and (index - start >= max_requests or size + length > max_bytes):
            parts.append(range(start, index))
            start, size = index, 0
        size += length
    if sizes:
        parts.append(range(start, len(sizes)))
    return parts
