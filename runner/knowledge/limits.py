"""How much of one source file the parsers read, and for how long: a knowledge base's
``parsing:`` (the ZIP limits of a DOCX are fixed). Plain values, imported with the
configuration; the parsers that apply them load only when a file is read."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ZipLimits:
    """How much of a ZIP container is read: ``max_members`` entries, ``max_inflated_bytes``
    of text members in all."""

    max_members: int = 2_000
    max_inflated_bytes: int = 20_000_000


@dataclass(frozen=True)
class ConversionLimits:
    """How much of one source file the parsers read, and for how long (``max_seconds``: the
    parse runs in a child process killed then; also checked between pages and paragraphs)."""

    max_pages: int = 5_000
    max_chars: int = 20_000_000  # of text, over all pages or paragraphs
    max_seconds: float = 120.0
    zip: ZipLimits = field(default_factory=ZipLimits)

    @classmethod
    def from_config(cls, parsing: dict[str, Any]) -> ConversionLimits:
        """From a knowledge base's validated ``parsing:`` (defaults for what it leaves out)."""
        return cls(
            max_pages=parsing.get("max_pages", DEFAULT_LIMITS.max_pages),
            max_chars=parsing.get("max_chars", DEFAULT_LIMITS.max_chars),
            max_seconds=float(parsing.get("max_seconds", DEFAULT_LIMITS.max_seconds)),
        )


DEFAULT_LIMITS = ConversionLimits()
