"""Classify what a Stainless-generated SDK (``openai``, ``anthropic``) raised into a
:class:`~runner.model.faults.Fault`: both SDKs raise exceptions of the same names and shapes.

Messages are built only from the status code, the ``Retry-After`` value and a short,
redacted excerpt of the response body: never ``str(exc)`` (it repeats the body, which
may echo the key) and never the request (its headers hold the key). The error body may be
OpenAI's ``{"error": {"message": ...}}`` or Anthropic's
``{"type": "error", "error": {"type": ..., "message": ...}}``: the message is read from both.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable, Mapping
from typing import Any

from runner.model.faults import QUOTA_CODES, QUOTA_EXCEEDED, Fault, kind_for_status, parse_retry_after
from runner.model.wire import InvalidResponse
from runner.redact import excerpt

SECRET_HEADER = re.compile(r"(?i)auth|key|token|secret|cookie")
"""A header whose name says it may hold a secret: its value is redacted from fault messages."""


def header_secrets(headers: Mapping[str, str]) -> tuple[str, ...]:
    """The values of ``headers`` (``model.extra_headers``) that fault messages must not repeat."""
    return tuple(value for name, value in headers.items() if SECRET_HEADER.search(name))


def classify_sdk(exc: Exception, secrets: Iterable[str | None], sdk: Any, base_error: type[Exception]) -> Fault:
    """Classify what a Stainless-generated SDK raised (``openai``, ``anthropic``: the same
    exception names under ``sdk``, rooted at ``base_error``); anything else is re-raised."""
    secrets = tuple(secrets)
    if isinstance(exc, sdk.APITimeoutError):
        return Fault("timeout", "the request timed out")
    if isinstance(exc, sdk.APIConnectionError) and isinstance(exc.__cause__, InvalidResponse):
        return Fault("invalid_response", excerpt(str(exc.__cause__), secrets))  # read by our own cap (ResponseTooLarge)
    if isinstance(exc, sdk.APIConnectionError):
        cause = type(exc.__cause__).__name__ if exc.__cause__ else "no detail"
        if isinstance(exc.__cause__, _not_sent()):
            return Fault("unreachable", f"could not connect to the endpoint ({cause})")
        return Fault("connection", f"the connection dropped ({cause})")
    if isinstance(exc, sdk.APIStatusError):
        return _status_fault(exc, secrets)
    if isinstance(exc, sdk.APIResponseValidationError):
        return Fault("invalid_response", "the response does not match the chat completion schema")
    if isinstance(exc, (json.JSONDecodeError, UnicodeDecodeError)):
        return Fault("invalid_response", f"the response body is not valid JSON ({type(exc).__name__})")
    if isinstance(exc, InvalidResponse):
        return Fault("invalid_response", excerpt(str(exc), secrets))
    if isinstance(exc, sdk.APIError):
        # e.g. an "error" event in the middle of a stream
        return Fault("server_error", f"the endpoint reported an error: {_body_text(exc.body, secrets)}")
    if isinstance(exc, base_error):
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


def _not_sent() -> tuple[type[BaseException], ...]:
    """Transport failures before any byte of the request left: nothing was processed or billed
    (looked up on each failure: the anthropic SDK's httpx may have been imported since)."""
    return _transport_errors("ConnectError", "UnsupportedProtocol", "InvalidURL")


def _status_fault(exc: Any, secrets: tuple[str | None, ...]) -> Fault:
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
    """The ``code`` and ``type`` of an error body (OpenAI's ``{"error": {"code": ..., "type": ...}}``;
    Anthropic's ``{"type": "error", "error": {"type": ...}}``)."""
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
