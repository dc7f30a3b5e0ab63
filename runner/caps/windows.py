"""The windows of a budget over time: which one an instant falls in, and its ledger key.

Calendar windows (``day``, ``week`` from Monday, ``month`` from the 1st) start at local
midnight in the budget's time zone (:mod:`zoneinfo`), so a Berlin month rolls over at
00:00 CET/CEST of the 1st, whatever the machine's zone. An ``{hours: N}`` window is a fixed
bucket of N hours counted from the Unix epoch in UTC (not a sliding window): a 24-hour budget
reopens at 00:00 UTC, a 6-hour one at 00, 06, 12 and 18 UTC.

A window's scope in the shared cap ledger is ``budget:<name>:<start>`` (the start as ISO
8601 with its UTC offset): a call reserves in the key of the window it was reserved in, and
settles there, even when the window has closed in between.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from runner.config.budgets import BudgetSpec

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Window:
    """One window of a budget: ``[start, end)``."""

    budget: str
    start: datetime
    end: datetime

    @property
    def key(self) -> str:
        """Its scope in the shared cap ledger."""
        return window_key(self.budget, self.start)

    def describe(self) -> str:
        """``2026-12-01T00:00:00+01:00 .. 2027-01-01T00:00:00+01:00``."""
        return f"{self.start.isoformat()} .. {self.end.isoformat()}"


def window_key(budget: str, start: datetime) -> str:
    return f"budget:{budget}:{start.isoformat()}"


def window_at(spec: BudgetSpec, when: datetime) -> Window:
    """The window of ``spec`` that the aware instant ``when`` falls in."""
    if isinstance(spec.window, int):
        size = timedelta(hours=spec.window)
        start = _EPOCH + size * ((when.astimezone(UTC) - _EPOCH) // size)
        return Window(spec.name, start, start + size)
    zone = ZoneInfo(spec.timezone)
    local = when.astimezone(zone)
    day = local.date()
    if spec.window == "week":
        day -= timedelta(days=day.weekday())
    elif spec.window == "month":
        day = day.replace(day=1)
    start = datetime(day.year, day.month, day.day, tzinfo=zone)
    return Window(spec.name, start, _next_start(spec, start, zone))


def previous_window(spec: BudgetSpec, window: Window) -> Window:
    """The window before ``window``."""
    return window_at(spec, window.start - timedelta(seconds=1))


def _next_start(spec: BudgetSpec, start: datetime, zone: ZoneInfo) -> datetime:
    """Local midnight of the next calendar unit (wall-clock arithmetic: 23 or 25 hours on a DST day)."""
    if spec.window == "day":
        nxt = start.date() + timedelta(days=1)
    elif spec.window == "week":
        nxt = start.date() + timedelta(days=7)
    else:
        nxt = (start.date().replace(day=28) + timedelta(days=4)).replace(day=1)
    return datetime(nxt.year, nxt.month, nxt.day, tzinfo=zone)
