"""A rate limiter shared by every row of a batch (the :class:`~runner.core.ports.RateGate` protocol).

Two token buckets, requests per minute and tokens per minute, refill continuously. A
caller waits in arrival order (one lock, so a large request is not starved by small ones)
until both buckets can pay for its call. A request larger than a bucket's burst is let
through when that bucket is full and drives it negative, so later callers wait it off
instead of the large request waiting forever.

:meth:`SharedRateLimiter.pause` holds every caller, waiting or arriving, until the pause
ends: one row seeing ``429 Retry-After: 20`` stops the whole batch from calling for 20 s,
instead of every row discovering the limit by itself.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

MAX_PAUSE_SECONDS = 300.0  # a hostile or broken Retry-After cannot hold the batch for hours


@dataclass
class TokenBucket:
    """``rate_per_minute`` units refilled continuously, holding at most ``burst`` units."""

    rate_per_minute: float
    burst: float
    level: float = field(init=False)
    updated: float | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        if not self.rate_per_minute > 0 or not self.burst > 0:
            raise ValueError("rate and burst must be positive")
        self.level = self.burst

    def refill(self, now: float) -> None:
        if self.updated is not None:
            self.level = min(self.burst, self.level + (now - self.updated) * self.rate_per_minute / 60.0)
        self.updated = now

    def wait_for(self, amount: float) -> float:
        """Seconds until ``amount`` can be taken (0 if now); an oversized amount needs a full bucket."""
        needed = min(amount, self.burst) - self.level
        return max(0.0, needed * 60.0 / self.rate_per_minute)

    def take(self, amount: float) -> None:
        self.level -= amount


class SharedRateLimiter:
    """Requests/minute and tokens/minute limits plus a batch-wide pause; ``None`` means unlimited.

    ``burst_seconds`` sizes each bucket as that many seconds of its rate (at least one
    request), so a fresh batch does not fire a whole minute's quota in its first second.
    ``clock`` and ``sleep`` are injectable for tests.
    """

    def __init__(
        self,
        requests_per_minute: float | None = None,
        tokens_per_minute: float | None = None,
        *,
        burst_seconds: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._clock, self._sleep = clock, sleep
        self._requests = _bucket(requests_per_minute, burst_seconds, minimum=1.0)
        self._tokens = _bucket(tokens_per_minute, burst_seconds, minimum=1.0)
        self._paused_until = 0.0
        self._lock = asyncio.Lock()
        self.waited_seconds = 0.0  # total time callers spent held here (for the batch report)
        self.pauses = 0

    @property
    def limits_tokens(self) -> bool:
        """Whether a tokens-per-minute limit applies (then estimates must be tight)."""
        return self._tokens is not None

    async def acquire(self, estimated_tokens: int) -> None:
        """Wait until one request of ``estimated_tokens`` may be sent, then count it."""
        started = self._clock()
        async with self._lock:
            while (delay := self._delay(estimated_tokens)) > 0:
                await self._sleep(delay)
            for bucket, amount in ((self._requests, 1), (self._tokens, estimated_tokens)):
                if bucket is not None:
                    bucket.take(amount)
        self.waited_seconds += self._clock() - started

    def pause(self, seconds: float) -> None:
        """Hold every caller for ``seconds`` from now (at most :data:`MAX_PAUSE_SECONDS`)."""
        if not seconds > 0:
            return
        self.pauses += 1
        until = self._clock() + min(seconds, MAX_PAUSE_SECONDS)
        self._paused_until = max(self._paused_until, until)

    @property
    def paused_for(self) -> float:
        """Seconds left in the current pause (0 when not paused)."""
        return max(0.0, self._paused_until - self._clock())

    def _delay(self, estimated_tokens: int) -> float:
        now = self._clock()
        if self._paused_until > now:
            return self._paused_until - now
        delays = [0.0]
        for bucket, amount in ((self._requests, 1), (self._tokens, estimated_tokens)):
            if bucket is not None:
                bucket.refill(now)
                delays.append(bucket.wait_for(amount))
        return max(delays)


def _bucket(rate: float | None, burst_seconds: float, *, minimum: float) -> TokenBucket | None:
    if rate is None:
        return None
    return TokenBucket(rate, max(minimum, rate * burst_seconds / 60.0))
