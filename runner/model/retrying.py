"""Calling an endpoint until it answers or the retry policy says stop: one loop for every SDK client."""

from __future__ import annotations

import dataclasses
import itertools
import random
import time
from collections.abc import Awaitable, Callable

from runner.errors import ModelError
from runner.model.base import AttemptHook, ModelResponse
from runner.model.faults import Fault, RetryPolicy

Sleep = Callable[[float], Awaitable[None]]
OnRetry = Callable[[str, int, float], None]


async def complete_with_retries(
    attempt: Callable[[], Awaitable[ModelResponse | Fault]],
    policy: RetryPolicy,
    *,
    rng: random.Random,
    sleep: Sleep,
    on_retry: OnRetry | None = None,
    attempts: AttemptHook | None = None,
) -> ModelResponse:
    """Run ``attempt`` until it returns an answer; each :class:`Fault` is retried after the wait
    ``policy`` gives, or raised as its :class:`ModelError`. ``latency_seconds`` is the successful
    attempt's; ``attempts`` hears of each failed attempt before its retry (and may stop the retries)."""
    for number in itertools.count(1):
        started = time.monotonic()
        outcome = await attempt()
        if isinstance(outcome, ModelResponse):
            return dataclasses.replace(outcome, latency_seconds=time.monotonic() - started)
        decision = policy.wait_before_retry(outcome, number, rng)
        if isinstance(decision, ModelError):
            raise decision
        if attempts is not None:
            attempts.retry(outcome.kind, outcome.message)
        if on_retry is not None:
            on_retry(outcome.kind, number, decision)
        await sleep(decision)
    raise AssertionError("unreachable")
