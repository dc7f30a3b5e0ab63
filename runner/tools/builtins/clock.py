"""Built-in ``current_time``: the current date and time, optionally in a time zone."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from runner.errors import ToolFailure
from runner.tools.base import ToolResult, tool


@tool
def current_time(timezone: str = "UTC") -> ToolResult:
    """Return the current date and time in ISO 8601 format.

    Args:
        timezone: An IANA time zone name such as "Europe/Paris" or "America/New_York".
    """
    try:
        zone = ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError, OSError):  # OSError: a name no file can have (too long, a directory)
        shown = timezone if len(timezone) <= 64 else timezone[:63] + "…"
        raise ToolFailure(f"unknown time zone {shown!r}; use an IANA name such as 'UTC' or 'Europe/Paris'") from None
    now = datetime.now(UTC).astimezone(zone)
    iso = now.isoformat(timespec="seconds")
    data = {"iso": iso, "timezone": timezone, "unix": int(now.timestamp()), "weekday": now.strftime("%A")}
    return ToolResult(content=f"{iso} ({timezone}, {data['weekday']})", data=data)
