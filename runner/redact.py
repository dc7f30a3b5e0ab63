"""Remove credentials from text before it reaches an exception, a log or a report.

Endpoint errors often echo what they were sent (``Incorrect API key provided: sk-…``)
and SDK exceptions hold the request with its ``Authorization`` header, so every
message we build from a provider's answer goes through :func:`redact` first.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

REDACTED = "[REDACTED]"

# Shapes of credentials worth hiding even when we were not told the exact value:
# bearer tokens, OpenAI-style keys (also the partially masked ``sk-abc***xyz`` echo),
# and ``api_key=...`` pairs in query strings or JSON.
_CREDENTIAL_PATTERNS = (
    re.compile(r"(?i)\bbearer\s+[^\s\"',;]+"),
    re.compile(r"\bsk-[A-Za-z0-9_\-*.]{4,}"),
    re.compile(r"(?i)(api[_-]?key[\"']?\s*[:=]\s*[\"']?)[^\s\"',;&}]+"),
)

# A secret shorter than this is too likely to match ordinary words; the patterns
# above still catch the common shapes.
_MIN_SECRET_LENGTH = 4


def redact(text: str, secrets: Iterable[str | None] = ()) -> str:
    """Return ``text`` with every given secret and every credential-shaped token replaced.

    ``secrets`` are exact values (API keys, tokens) to hide wherever they occur; ``None``
    and very short values are ignored. Credential shapes (``Bearer …``, ``sk-…``,
    ``api_key=…``) are hidden even when not listed.
    """
    for secret in sorted((s for s in secrets if s and len(s) >= _MIN_SECRET_LENGTH), key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    for pattern in _CREDENTIAL_PATTERNS:
        text = pattern.sub(_replacement, text)
    return text


def redact_secrets(value: Any, secrets: Iterable[str | None]) -> Any:
    """``value`` with every exact secret replaced wherever a string holds it, through dicts,
    lists and tuples (tuples come back as lists). Unlike :func:`redact`, ordinary text that
    only looks like a credential is left alone: this is for our own records and tool output.
    """
    listed = sorted((s for s in secrets if s and len(s) >= _MIN_SECRET_LENGTH), key=len, reverse=True)
    if not listed:
        return value
    if not isinstance(value, str):
        text = json.dumps(value, default=str, ensure_ascii=False)
        if not any(secret in text for secret in listed):
            return value  # the common case: one serialisation instead of a walk
    return _replace(value, listed)


def _replace(value: Any, secrets: list[str]) -> Any:
    if isinstance(value, str):
        for secret in secrets:
            value = value.replace(secret, REDACTED)
        return value
    if isinstance(value, dict):
        return {k: _replace(v, secrets) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_replace(v, secrets) for v in value]
    return value


def excerpt(text: str, secrets: Iterable[str | None] = (), limit: int = 200) -> str:
    """Redact ``text``, collapse whitespace and shorten it to about ``limit`` characters."""
    flat = " ".join(redact(text, secrets).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _replacement(match: re.Match[str]) -> str:
    # Keep the "api_key=" prefix when the pattern captured one, so the message still
    # says which field was hidden.
    prefix = match.group(1) if match.re.groups else ""
    return f"{prefix}{REDACTED}"
