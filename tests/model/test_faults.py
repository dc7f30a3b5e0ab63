"""Retry decisions and Retry-After parsing, without any HTTP."""

from __future__ import annotations

import email.utils
import random
import time

import pytest

from runner.errors import ModelError
from runner.model.faults import Fault, RetryPolicy, kind_for_status, parse_retry_after


@pytest.mark.parametrize(
    ("status", "kind"),
    [(400, "bad_request"), (401, "auth"), (403, "auth"), (404, "not_found"), (408, "timeout"), (409, "server_error"),
     (413, "bad_request"), (429, "rate_limited"), (500, "server_error"), (529, "server_error")],
)  # fmt: skip
def test_kind_for_status(status, kind):
    assert kind_for_status(status) == kind


def test_retry_after_forms():
    assert parse_retry_after({"retry-after": "2"}) == 2.0
    assert parse_retry_after({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after({}) is None
    future = email.utils.formatdate(time.time() + 120, usegmt=True)
    assert 100 < parse_retry_after({"retry-after": future}) <= 121


def test_policy_budgets_and_non_retryable_kinds():
    policy = RetryPolicy(max_retries=2, invalid_response_retries=1, jitter=0)
    rng = random.Random(0)
    assert policy.wait_before_retry(Fault("server_error", "x"), 2, rng) == 1.0
    assert isinstance(policy.wait_before_retry(Fault("server_error", "x"), 3, rng), ModelError)
    assert isinstance(policy.wait_before_retry(Fault("invalid_response", "x"), 2, rng), ModelError)
    assert isinstance(policy.wait_before_retry(Fault("auth", "x"), 1, rng), ModelError)


def test_zero_retry_after_still_waits():
    policy = RetryPolicy()
    assert policy.wait_before_retry(Fault("rate_limited", "x", 0.0), 1, random.Random(0)) == 0.5


def test_invalid_policies_are_rejected():
    with pytest.raises(ValueError):
        RetryPolicy(base_delay_seconds=0)
    with pytest.raises(ValueError):
        RetryPolicy(jitter=1.0)
