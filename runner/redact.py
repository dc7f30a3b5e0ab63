"""Remove credentials from text before it reaches an exception, a log or a report.

Endpoint errors often echo what they were sent (``Incorrect API key provided: sk-…``)
and SDK exceptions hold the request with its ``Authorization`` header, so every
message we build from a provider's answer goes through :func:`redact` first.

A secret is looked for in every form the text may carry it in: verbatim, hex- and
base64-encoded (:func:`encoded_forms`, the forms the report screen looks for in files
too), and behind JSON ``\\u`` escapes (``\\u0073k-…`` in a tool call's arguments is the
key once decoded): a string that spells a secret with escapes is stored with those escapes
decoded and the secret replaced.

What is stored as JSON is redacted as it is serialised (:func:`redacted_json`): the text is
searched for the forms, as JSON spells them, and the value walked only when one is there.
"""

from __future__ import annotations

import base64
import functools
import json
import re
from collections.abc import Callable, Iterable, Sequence
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
MIN_ENCODED_LENGTH = 8  # an encoded fragment shorter than this would match ordinary text by chance
_ESCAPE = re.compile(r"\\u([0-9A-Fa-f]{4})")


def encoded_forms(secret: str) -> list[tuple[str, str]]:
    """``(description, text)`` for each encoded way ``secret`` may be written: hex (both
    cases) and the base64 fragments (standard and URL-safe alphabets) it leaves in a longer
    encoded stream at each of its three alignments. Forms shorter than
    :data:`MIN_ENCODED_LENGTH` are left out."""
    raw = secret.encode("utf-8")
    forms = [("hex-encoded", raw.hex()), ("hex-encoded", raw.hex().upper())]
    for offset in range(3):
        padded = bytes(offset) + raw
        start = -(-8 * offset // 6)  # first character made only of secret bits
        end = 8 * len(padded) // 6  # characters fully determined by the input
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            forms.append(("base64-encoded", encode(padded)[start:end].decode("ascii")))
    unique = dict.fromkeys((name, form) for name, form in forms if len(form) >= MIN_ENCODED_LENGTH)
    return list(unique)


def text_forms(secrets: Iterable[str | None]) -> tuple[str, ...]:
    """Every text form of each secret long enough to look for (verbatim, then encoded),
    longest first, so a longer form is replaced before a shorter one inside it."""
    return _forms_of(frozenset(s for s in secrets if s and len(s) >= _MIN_SECRET_LENGTH))


@functools.lru_cache(maxsize=64)
def _forms_of(listed: frozenset[str]) -> tuple[str, ...]:
    """:func:`text_forms` of a set of secrets: a run redacts with the same few keys at every
    call, so their encodings are worked out once, not per record."""
    forms = {form for secret in listed for form in (secret, *(text for _, text in encoded_forms(secret)))}
    return tuple(sorted(forms, key=len, reverse=True))


def redact(text: str, secrets: Iterable[str | None] = ()) -> str:
    """Return ``text`` with every given secret and every credential-shaped token replaced.

    ``secrets`` are exact values (API keys, tokens) to hide wherever they occur; ``None``
    and very short values are ignored. Credential shapes (``Bearer …``, ``sk-…``,
    ``api_key=…``) are hidden even when not listed.
    """
    text = _replace_text(text, text_forms(secrets))
    for pattern in _CREDENTIAL_PATTERNS:
        text = pattern.sub(_replacement, text)
    return text


def redact_secrets(value: Any, secrets: Iterable[str | None]) -> Any:
    """``value`` with every secret replaced wherever a string holds it (in any of its
    :func:`text_forms`, or behind JSON ``\\u`` escapes), through dicts, lists and tuples
    (tuples come back as lists) and their keys. Unlike :func:`redact`, ordinary text that
    only looks like a credential is left alone: this is for our own records and tool output.
    """
    forms = text_forms(secrets)
    if not forms or value is None or isinstance(value, bool | int | float):
        return value
    if not isinstance(value, str) and not _may_hold(json.dumps(value, default=str, ensure_ascii=False), forms):
        return value  # the common case: one serialisation instead of a walk
    return _replace(value, forms)


def redacted_json(value: Any, secrets: Iterable[str | None], dumps: Callable[[Any], str]) -> str:
    """``dumps(value)`` as if ``value`` had gone through :func:`redact_secrets` first, serialised
    once: the text is searched for the secrets' forms and walked and serialised again only when
    one may be in it. For what is stored as JSON (``dumps`` is the store's serialisation)."""
    forms = text_forms(secrets)
    text = dumps(value)
    if forms and _may_hold(text, forms):
        return dumps(_replace(value, forms))
    return text


def _may_hold(text: str, forms: tuple[str, ...]) -> bool:
    """Whether JSON ``text`` may have a string holding one of ``forms``: one is in it as JSON
    writes it (a ``"`` or ``\\`` in a form is escaped there), or a ``\\u`` escape is (which may
    spell one; it is also how ``ensure_ascii`` writes other characters)."""
    return "\\u" in text or any(form in text for form in _json_spellings(forms))


@functools.lru_cache(maxsize=64)
def _json_spellings(forms: tuple[str, ...]) -> tuple[str, ...]:
    """Each form as it is written inside a JSON string, and as it is when that differs."""
    escaped = (json.dumps(form, ensure_ascii=False)[1:-1] for form in forms)
    return tuple(dict.fromkeys((*forms, *escaped)))


def _replace(value: Any, forms: Sequence[str]) -> Any:
    if isinstance(value, str):
        return _replace_text(value, forms)
    if isinstance(value, dict):
        return {_replace(k, forms) if isinstance(k, str) else k: _replace(v, forms) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_replace(v, forms) for v in value]
    return value


def _replace_text(text: str, forms: Sequence[str]) -> str:
    if "\\u" in text:
        decoded = decode_escapes(text)
        if any(form in decoded for form in forms):
            text = decoded  # the secret was spelled with escapes: keep it decoded, to replace it
    for form in forms:
        text = text.replace(form, REDACTED)
    return text


def decode_escapes(text: str) -> str:
    """``text`` with each JSON ``\\uXXXX`` escape of a printable character decoded, except
    the quote and the backslash (so JSON text stays JSON)."""

    def decoded(match: re.Match[str]) -> str:
        char = chr(int(match.group(1), 16))
        return char if char.isprintable() and char not in '"\\' and not 0xD800 <= ord(char) <= 0xDFFF else match.group()

    return _ESCAPE.sub(decoded, text)


def excerpt(text: str, secrets: Iterable[str | None] = (), limit: int = 200) -> str:
    """Redact ``text``, collapse whitespace and shorten it to about ``limit`` characters."""
    flat = " ".join(redact(text, secrets).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _replacement(match: re.Match[str]) -> str:
    # Keep the "api_key=" prefix when the pattern captured one, so the message still
    # says which field was hidden.
    prefix = match.group(1) if match.re.groups else ""
    return f"{prefix}{REDACTED}"
