"""What a caller can hand a run: where its events go, and a rate gate shared by many runs."""

from __future__ import annotations

from typing import Any, Protocol


class RateGate(Protocol):
    """A shared rate limiter the run consults before each model call (batch runs)."""

    @property
    def limits_tokens(self) -> bool:
        """Whether :meth:`acquire` holds calls by their estimated tokens (a tokens-per-minute
        limit): only then must a call's prompt be counted tightly for the gate."""

    async def acquire(self, estimated_tokens: int) -> None: ...

    def pause(self, seconds: float) -> None:
        """Hold every caller for ``seconds`` (a 429 with Retry-After seen by anyone)."""


class EventSink(Protocol):
    """Receives run events (dicts with an ``event`` key); the CLI renders them."""

    def __call__(self, event: dict[str, Any]) -> None: ...
