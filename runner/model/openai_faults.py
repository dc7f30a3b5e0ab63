"""Classify what the openai SDK raised into a :class:`~runner.model.faults.Fault`.

Messages are built only from the status code, the ``Retry-After`` value and a short,
redacted excerpt of the response body: never ``str(exc)`` (it repeats the body, which
may echo the key) and never the request (its headers hold ``Bearer sk-…``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable

import openai

from runner.model.faults import Fault
from runner.model.sdk_faults import _not_sent, classify_sdk
from runner.model.wire import InvalidResponse

# What a call through the SDK may raise that is the endpoint's fault rather than ours.
# json errors: a 200 whose body or stream event is not JSON is decoded outside the SDK's
# error handling.
ENDPOINT_EXCEPTIONS: tuple[type[Exception], ...] = (
    openai.OpenAIError,
    json.JSONDecodeError,
    UnicodeDecodeError,
    InvalidResponse,
)


def classify(exc: Exception, secrets: Iterable[str | None]) -> Fault:
    """Classify one of :data:`ENDPOINT_EXCEPTIONS`; anything else is re-raised (our bug)."""
    return classify_sdk(exc, secrets, openai, openai.OpenAIError)


__all__ = ["ENDPOINT_EXCEPTIONS", "_not_sent", "classify"]
