"""Classify what the openai SDK raised into a :class:`~runner.model.faults.Fault`.

Messages are built only from the status code, the ``Retry-After`` value and a short,
redacted excerpt of the response body: never ``str(exc)`` (it repeats the body, which
may echo the key) and never the request (its headers hold ``Bearer sk-…``).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable

import openai

from runner.model.faults import QUOTA_CODES, QUOTA_EXCEEDED, Fault, kind_for_status, parse_retry_after
from runner.model.wire import InvalidResponse
from runner.redact import excerpt

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
    secrets = tuple(secrets)
    if isinstance(exc, openai.APITimeoutError):
        return Fault("timeout", "the request timed out")
    if isinstance(exc, openai.APIConnectionError):
        cause = type(exc.__cause__).__name__ if exc.__cause__ else "no detail"
        if isinstance(exc.__cause__, _NOT_SENT):
            return Fault("unreachable", f"could not connect to the endpoint ({cause})")
        return Fault("connection", f"the connection dropped ({cause})")
    if isinstance(exc, openai.APIStatusError):
        return _status_fault(exc, secrets)
    if isinstance(exc, openai.APIResponseValidationError):
        return Fault("invalid_response", "the response does not match the chat completion schema")
    if isinstance(exc, (json.JSONDecodeError, UnicodeDecodeError)):
        return Fault("invalid_response", f"the response body is not valid JSON ({type(exc).__name__})")
    if isinstance(exc, InvalidResponse):
        return Fault("invalid_response", excerpt(str(exc), secrets))
    if isinstance(exc, openai.APIError):
        # e.g. an "error" event in the middle of a stream
        return Fault("server_error", f"the endpoint reported an error: {_body_text(exc.body, secrets)}")
    if isinstance(exc, openai.OpenAIError):
        return Fault("bad_request", f"the SDK refused the request ({type(exc).__name__})")
    raise exc


def _transport_errors(*names: str) -> tuple[type[BaseException], ...]:
    """The SDK's transport exception classes of these names (its httpx, or httpx2 fork).

    Only a transport the SDK has already imported is looked at: importing another one would
    load it for nothing (plain httpx also brings its command line: click, rich, pygments)."""
    found: list[type[BaseException]] = []
    for module_name in ("httpx2", "httpx"):
        module = sys.modules.get(module_name)
        if module is not None:
            found += [getattr(module, name) for name in names if hasattr(module, name)]
    return tuple(found)


_NOT_SENT = _transport_errors("ConnectError", "UnsupportedProtocol", "InvalidURL")
"""Transport failures before any byte of the request left: nothing was processed or billed."""


def _status_fault(exc: openai.APIStatusError, secrets: tuple[str | None, ...]) -> Fault:
    status = exc.status_code
    retry_after = parse_retry_after(exc.response.headers)
    detail = _body_text(exc.body, secrets)
    message = f"HTTP {status}" + (f": {detail}" if detail else "")
    if status == 429 and _error_codes(exc.body) & QUOTA_CODES:
        return Fault(
            QUOTA_EXCEEDED,
            f"{message}; the provider's spend or quota limit was reached: raise it with the provider (retrying cannot help)",
        )
    if retry_after is not None:
        message += f" (Retry-After: {retry_after:g} s)"
    return Fault(kind_for_status(status), message, retry_after_seconds=retry_after)


def _error_codes(body: object) -> set[str]:
    """The ``code`` and ``type`` of an OpenAI-style error body (``{"error": {"code": ..., "type": ...}}``)."""
    error = body.get("error", body) if isinstance(body, dict) else None
    if not isinstance(error, dict):
        return set()
    return {value for value in (error.get("code"), error.get("type")) if isinstance(value, str)}


def _body_text(body: object, secrets: tuple[str | None, ...]) -> str:
    """The error message of an OpenAI-style error body, or a short excerpt of the body."""
    if isinstance(body, dict):
        error = body.get("error", body)
        message = error.get("message") if isinstance(error, dict) else error
        text = message if isinstance(message, str) else json.dumps(body, default=str)
    elif body is None:
        return ""
    else:
        text = str(body)
    return excerpt(text, secrets)
