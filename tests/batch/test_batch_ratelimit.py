"""The shared rate limiter: buckets, arrival order, and a pause that holds every caller."""

from __future__ import annotations

import asyncio
import time

import pytest

from runner.batch.ratelimit import MAX_PAUSE_SECONDS, SharedRateLimiter, TokenBucket

pytestmark = pytest.mark.timeout(30)


def test_token_bucket_refills_continuously_and_allows_oversized_requests_into_debt() -> None:
    bucket = TokenBucket(rate_per_minute=60, burst=2)  # one unit per second
    bucket.refill(100.0)
    assert bucket.wait_for(2) == 0
    bucket.take(2)
    assert bucket.wait_for(1) == pytest.approx(1.0)
    bucket.refill(100.5)
    assert bucket.wait_for(1) == pytest.approx(0.5)
    bucket.refill(110.0)
    assert bucket.level == 2  # never more than the burst
    assert bucket.wait_for(50) == 0  # larger than the burst: allowed once the bucket is full
    bucket.take(50)
    assert bucket.wait_for(1) == pytest.approx(49.0)
    with pytest.raises(ValueError):
        TokenBucket(rate_per_minute=float("nan"), burst=1)


async def test_pause_holds_waiting_and_arriving_callers() -> None:
    gate = SharedRateLimiter()
    gate.pause(0.2)
    paused_until = time.monotonic() + 0.2
    done: list[float] = []

    async def caller() -> None:
        await gate.acquire(100)
        done.append(time.monotonic())

    await asyncio.gather(*(caller() for _ in range(5)))
    assert len(done) == 5 and min(done) >= paused_until - 0.01
    assert gate.paused_for == 0


async def test_request_rate_is_enforced_in_arrival_order() -> None:
    # a fake clock: the limiter's arithmetic, not the machine's speed, decides
    now = [0.0]
    sleeps: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        sleeps.append(seconds)
        now[0] += seconds

    gate = SharedRateLimiter(requests_per_minute=60, burst_seconds=1, clock=lambda: now[0], sleep=fake_sleep)
    order: list[int] = []

    async def caller(i: int) -> None:
        await gate.acquire(0)
        order.append(i)

    await asyncio.gather(*(caller(i) for i in range(3)))
    assert order == [0, 1, 2]
    assert sleeps == [pytest.approx(1.0), pytest.approx(1.0)]  # one request per second after the burst


def test_pause_is_capped_and_ignores_nonsense() -> None:
    now = [0.0]
    gate = SharedRateLimiter(clock=lambda: now[0])
    gate.pause(float("nan"))
    gate.pause(-5)
    assert gate.paused_for == 0 and gate.pauses == 0
    gate.pause(10_000)
    assert gate.paused_for == MAX_PAUSE_SECONDS


async def test_token_rate_is_enforced() -> None:
    now = [0.0]
    sleeps: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        sleeps.append(seconds)
        now[0] += seconds

    gate = SharedRateLimiter(tokens_per_minute=600, burst_seconds=1, clock=lambda: now[0], sleep=fake_sleep)
    await gate.acquire(10)  # the whole burst (10 tokens)
    await gate.acquire(5)
    assert sleeps == [pytest.approx(0.5)]  # 5 tokens at 10 tokens/second
