"""How long a deferred provider batch may wait: the try's execution_timeout and the batch's wall cap."""

from __future__ import annotations

import datetime as dt

import pytest

from runner.airflow.deferral import CANCEL_GRACE_SECONDS, DeadlinePassed, cancel_at, defer_timeout

NOW = dt.datetime(2026, 3, 2, 12, 0, tzinfo=dt.UTC)


def test_no_bound_means_no_timeout() -> None:
    assert defer_timeout(None, None, NOW) is None
    assert cancel_at(None, age_seconds=50, now=1000.0) is None


def test_the_try_deadline_bounds_the_deferral() -> None:
    assert defer_timeout(NOW + dt.timedelta(minutes=90), None, NOW) == dt.timedelta(minutes=90)


def test_a_try_deadline_already_passed_is_refused() -> None:
    with pytest.raises(DeadlinePassed, match="execution_timeout reached at 2026-03-02T11:59:59"):
        defer_timeout(NOW - dt.timedelta(seconds=1), None, NOW)
    with pytest.raises(DeadlinePassed):
        defer_timeout(NOW, None, NOW)


def test_the_wall_cap_counts_from_the_batch_start_and_leaves_time_to_confirm_the_cancel() -> None:
    cancel = cancel_at(3600, age_seconds=600, now=NOW.timestamp())
    assert cancel == NOW.timestamp() + 3000
    assert defer_timeout(None, cancel, NOW) == dt.timedelta(seconds=3000 + CANCEL_GRACE_SECONDS)
    assert defer_timeout(NOW + dt.timedelta(seconds=60), cancel, NOW) == dt.timedelta(seconds=60)  # the sooner


def test_a_wall_cap_already_passed_still_gives_the_provider_the_grace_to_confirm_the_cancel() -> None:
    cancel = cancel_at(60, age_seconds=60 + 2 * CANCEL_GRACE_SECONDS, now=NOW.timestamp())
    assert cancel is not None and cancel < NOW.timestamp()
    assert defer_timeout(None, cancel, NOW) == dt.timedelta(seconds=CANCEL_GRACE_SECONDS)
