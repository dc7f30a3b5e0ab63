"""Request bodies checked against the ``anthropic`` package's own request types, as assertions
(the loopback server refuses the same: :mod:`runner.model.anthropic_conformance`)."""

from __future__ import annotations

from typing import Any

from runner.model.anthropic_conformance import batch_request_problem, messages_problem, unknown_keys

__all__ = ["check_batch_request", "check_messages_body", "unknown_keys"]


def check_messages_body(body: dict[str, Any]) -> None:
    """Raise unless ``body`` is a valid ``POST /v1/messages`` body by the SDK's own types."""
    problem = messages_problem(body)
    assert problem is None, f"not a Messages body: {problem}"


def check_batch_request(request: dict[str, Any]) -> None:
    """Raise unless ``request`` is a valid Message Batches request (``{custom_id, params}``)."""
    problem = batch_request_problem(request)
    assert problem is None, f"not a Message Batches request: {problem}"
