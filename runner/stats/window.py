"""The time window of ``runner stats``: ``--since 7d`` (s, m, h, d, w back from now) or a date
or ISO-8601 time, ``--until`` likewise (default: now), and the trend's bucket size."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal

from runner.core.ages import EARLIEST, AgeError, before, parse_age
from runner.errors import UsageError

Bucket = Literal["hour", "day", "week"]


@dataclass(frozen=True)
class Window:
    """``[since, until)`` in UTC."""

    since: datetime
    until: datetime

    @property
    def length(self) -> timedelta:
        return self.until - self.since

    def previous(self) -> Window:
        """The window of the same length just before this one."""
        return Window(before(self.since, self.length), self.since)

    def iso(self) -> tuple[str, str]:
        """Bounds as the run store writes times (ISO-8601 UTC, milliseconds), for text comparison."""
        return _iso(self.since), _iso(self.until)

    def default_bucket(self) -> Bucket:
        if self.length <= timedelta(days=2):
            return "hour"
        return "day" if self.length <= timedelta(days=62) else "week"


def parse_window(since: str, until: str | None = None, now: datetime | None = None) -> Window:
    """The window from ``--since`` / ``--until``; :class:`UsageError` naming the flag otherwise."""
    now = now or datetime.now(UTC)
    start = parse_time(since, now, "--since")
    end = parse_time(until, now, "--until") if until else now
    if start >= end:
        raise UsageError(f"--since {since} is not before --until {until or 'now'}; give an earlier --since")
    return Window(start, end)


def parse_time(text: str, now: datetime, flag: str) -> datetime:
    """``7d`` (back from ``now``), ``2026-11-30`` or ``2026-11-30T12:00`` (UTC unless an offset is given)."""
    value = text.strip()
    if value[-1:] in ("s", "m", "h", "d", "w"):
        try:
            return before(now, parse_age(value, positive=False))
        except AgeError as exc:
            raise UsageError(f"{flag}: {exc}, or a date (2026-11-30)") from None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise UsageError(f"{flag} {text!r}: give a duration back from now (30m, 24h, 7d, 4w) or a date (2026-11-30)") from None
    parsed = parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    try:
        return parsed.astimezone(UTC)
    except OverflowError:  # 0001-01-01T00:00+01:00 is before the earliest UTC moment
        return EARLIEST


def bucket_start(moment: datetime, bucket: Bucket) -> datetime:
    """The start of the hour, day or (ISO, Monday) week ``moment`` falls in."""
    moment = moment.astimezone(UTC)
    if bucket == "hour":
        return moment.replace(minute=0, second=0, microsecond=0)
    day = moment.replace(hour=0, minute=0, second=0, microsecond=0)
    return day - timedelta(days=day.weekday()) if bucket == "week" else day


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds")
