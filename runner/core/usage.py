"""One value for what something used: tokens, money, model calls and tool calls.

The budget, an agent's outcome, a step record, a run result and a journal row all hold a
:class:`Usage`; they add them up with ``+`` and serialise them with :meth:`Usage.as_dict`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any


@dataclass(frozen=True)
class Usage:
    """Tokens (``cached_input_tokens`` is the part of ``input_tokens`` the endpoint served from
    its prompt cache, ``cache_write_tokens`` the part it wrote to it; ``reasoning_tokens`` is
    the part of ``output_tokens`` a reasoning model spent thinking), US dollars, model calls
    and tool calls."""

    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    cost_usd: float = 0.0
    model_calls: int = 0
    tool_calls: int = 0
    reasoning_tokens: int = 0
    cache_write_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    @property
    def cache_hit_rate(self) -> float | None:
        """The share of input tokens the endpoint served from its prompt cache (``None``
        when nothing was sent)."""
        return cache_hit_rate(self.input_tokens, self.cached_input_tokens)

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cached_input_tokens + other.cached_input_tokens,
            self.cost_usd + other.cost_usd,
            self.model_calls + other.model_calls,
            self.tool_calls + other.tool_calls,
            self.reasoning_tokens + other.reasoning_tokens,
            self.cache_write_tokens + other.cache_write_tokens,
        )

    def __sub__(self, other: Usage) -> Usage:
        return self + Usage(
            -other.input_tokens, -other.output_tokens, -other.cached_input_tokens,
            -other.cost_usd, -other.model_calls, -other.tool_calls, -other.reasoning_tokens, -other.cache_write_tokens,
        )

    def as_dict(self) -> dict[str, Any]:
        """The JSON shape (``report.schema.json#/$defs/usage_rollup``), with ``total_tokens``."""
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cached_input_tokens": self.cached_input_tokens,
            "total_tokens": self.total_tokens,
            "cost_usd": round(self.cost_usd, 8),
            "model_calls": self.model_calls,
            "tool_calls": self.tool_calls,
            "reasoning_tokens": self.reasoning_tokens,
            "cache_write_tokens": self.cache_write_tokens,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> Usage:
        """The inverse of :meth:`as_dict` (missing keys are zero; ``total_tokens`` is derived)."""
        data = data or {}
        ints = {f.name: int(data.get(f.name) or 0) for f in fields(cls) if f.name != "cost_usd"}
        return cls(**ints, cost_usd=float(data.get("cost_usd") or 0.0))


def cache_hit_rate(input_tokens: float, cached_input_tokens: float) -> float | None:
    """``cached_input_tokens / input_tokens`` (at most 1), or ``None`` without input tokens;
    the one definition the run and batch reports share."""
    if input_tokens <= 0:
        return None
    return min(max(cached_input_tokens, 0) / input_tokens, 1.0)
