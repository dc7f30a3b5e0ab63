"""Which Batch API an endpoint speaks under ``--via batch-api``, and how much one batch may hold.

Two flavours: OpenAI's Files + Batches (``/v1/files``, ``/v1/batches``; OpenAI, and any
compatible endpoint that implements them), at most 50,000 requests and 200 MB per batch; and
Anthropic's Message Batches (``/v1/messages/batches``), at most 100,000 requests and 256 MB.
A task's ``batch_api:`` block (or ``--batch-max-requests`` / ``--batch-max-bytes``) may only
lower them.
"""

from __future__ import annotations

from runner.batch.message_batches import MAX_BYTES, MAX_REQUESTS, MessageBatchesClient
from runner.batch.provider_api import ProviderClient
from runner.config.specs import BatchApiLimits
from runner.model.factory import Endpoint

BatchClient = ProviderClient | MessageBatchesClient
"""The Batch API of one endpoint (both flavours have the same methods)."""

OPENAI_LIMITS = BatchApiLimits(max_requests=50_000, max_file_bytes=200_000_000)
ANTHROPIC_LIMITS = BatchApiLimits(max_requests=MAX_REQUESTS, max_file_bytes=MAX_BYTES)


def batch_client(endpoint: Endpoint) -> BatchClient:
    """The Batch API client for ``endpoint``'s provider."""
    if endpoint.provider == "anthropic":
        return MessageBatchesClient(endpoint)
    return ProviderClient(endpoint)


def flavour_limits(endpoint: Endpoint) -> BatchApiLimits:
    """What one provider batch of ``endpoint``'s flavour may hold, at most."""
    return ANTHROPIC_LIMITS if endpoint.provider == "anthropic" else OPENAI_LIMITS


def split_limits(endpoint: Endpoint, asked: BatchApiLimits | None) -> tuple[int, int]:
    """``(requests, bytes)`` a round's batch for ``endpoint`` may hold: the flavour's limits,
    lowered by what the task or the flags ask."""
    most = flavour_limits(endpoint)
    assert most.max_requests is not None and most.max_file_bytes is not None
    requests = min(most.max_requests, asked.max_requests or most.max_requests) if asked else most.max_requests
    size = min(most.max_file_bytes, asked.max_file_bytes or most.max_file_bytes) if asked else most.max_file_bytes
    return requests, size
