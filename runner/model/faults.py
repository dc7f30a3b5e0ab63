"""Classified endpoint faults and the retry policy applied to them.

Provider adapters turn whatever their SDK raised into a :class:`Fault`; the policy
decides whether and how long to wait before the next attempt; what cannot be retried
becomes a :class:`runner.errors.ModelError` with the same ``kind``.
"""

from __future__ import annotations

import email.utils
import math
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass

from runner.errors import ModelError

# kind -> retried by default
RETRYABLE_KINDS = frozenset(
    {"rate_limited", "server_error", "timeout", "connection", "unreachable", "invalid_response"}
)
# ``unreachable``: no connection was made (refused, no route, bad scheme), so nothing was sent
# or billed; ``connection``: the connection dropped after the request may have been sent.
QUOTA_EXCEEDED = "quota_exceeded"
"""A 429 that is the provider's own spend or quota ceiling, not a rate limit: never retried
(each retry would be refused the same way until someone raises the limit), and a batch stops."""
QUOTA_CODES = frozenset({"insufficient_quota", "billing_hard_limit_reached"})
"""The ``error.code``/``error.type`` values that say so (OpenAI's documented quota errors)."""


@dataclass(frozen=True)
class Fault:
    """One failed attempt: a ``ModelError`` kind, a redacted message, an optional server wait."""

    kind: str
    message: str
    retry_after_seconds: float | None = None

    def to_error(self, attempts: int, note: str = "") -> ModelError:
        """The error to raise when no more attempts will be made."""
        tried = f" (after {attempts} attempts)" if attempts > 1 else ""
        return ModelError(self.kind, f"{self.message}{tried}{note}")


def kind_for_status(status: int) -> str:
    """Classify an HTTP error status into a ``ModelError`` kind."""
    if status in (401, 403):
        return "auth"
    if status == 404:
        return "not_found"
    if status == 408:
        return "timeout"
    if status == 429:
        return "rate_limited"
    if status >= 500 or status == 409:  # 409: lock timeouts, retried like the SDK does
        return "server_error"
    return "bad_request"


def parse_retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds to wait from ``retry-after-ms`` or ``Retry-After`` (seconds or HTTP date).

    ``headers`` must be case-insensitive or lower-cased. Returns ``None`` when absent or
    unreadable; never a negative number.
    """
    for name, divisor in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            seconds = float(value) / divisor
        except ValueError:
            continue
        if math.isfinite(seconds):
            return max(seconds, 0.0)
        return math.inf
    date = headers.get("retry-after")
    parsed = email.utils.parsedate_tz(date) if date else None
    return max(email.utils.mktime_tz(parsed) - time.time(), 0.0) if parsed else None


@dataclass(frozen=True)
class RetryPolicy:
    """How many attempts to make and how long to wait between them.

    Waits grow as ``base_delay_seconds * 2**(attempt-1)``, capped at
    ``max_delay_seconds``, with up to ``jitter`` (a fraction) taken off at random so
    concurrent runs do not retry in lockstep. A server's ``Retry-After`` is honoured
    when it is at most ``max_retry_after_seconds``; a longer one fails the call at once
    (``rate_limited``) instead of sleeping. Invalid 200 answers get their own, smaller
    retry budget.
    """

    max_retries: int = 3
    base_delay_seconds: float = 0.5
    max_delay_seconds: float = 8.0
    max_retry_after_seconds: float = 60.0
    invalid_response_retries: int = 2
    jitter: float = 0.25

    def __post_init__(self) -> None:
        if self.max_retries < 0 or self.invalid_response_retries < 0:
            raise ValueError("retry counts must be >= 0")
        if not 0 < self.base_delay_seconds <= self.max_delay_seconds:
            raise ValueError("need 0 < base_delay_seconds <= max_delay_seconds")
        if not 0 <= self.jitter < 1:
            raise ValueError("jitter must be in [0, 1)")

    def wait_before_retry(self, fault: Fault, attempt: int, rng: random.Random) -> float | ModelError:
        """Seconds to wait before attempt ``attempt + 1``, or the error to raise instead."""
        budget = self.max_retries
        if fault.kind == "invalid_response":
            budget = min(budget, self.invalid_response_retries)
        if fault.kind not in RETRYABLE_KINDS or attempt > budget:
            return fault.to_error(attempt)
        if fault.retry_after_seconds is not None:
            if fault.retry_after_seconds > self.max_retry_after_seconds:
                return fault.to_error(
                    attempt,
                    f"; the server asked to wait {_seconds(fault.retry_after_seconds)} (Retry-After), "
                    f"more than max_retry_after_seconds={_seconds(self.max_retry_after_seconds)}, so not retrying",
                )
            # A zero Retry-After still gets the base delay: never a hot loop.
            return max(fault.retry_after_seconds, self.base_delay_seconds)
        backoff = min(self.max_delay_seconds, self.base_delay_seconds * 2 ** min(attempt - 1, 30))
        return max(self.base_delay_seconds, backoff * (1 - self.jitter * rng.random()))


def _seconds(value: float) -> str:
    return "forever" if math.isinf(value) else f"{value:g} s"
