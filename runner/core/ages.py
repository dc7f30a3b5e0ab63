"""Ages written on the command line (``30d``, ``12h``, ``2w``, ``90m``, ``45s``) and the moment
an age before now: ``runs prune --older-than`` and ``runner stats --since/--until`` share them.

Only ASCII digits count (``int()`` would read Arabic-Indic or full-width ones), an age is at
most 10,000 years (longer is refused), and an age that reaches before the year 1 ends at the
earliest moment a :class:`~datetime.datetime` can hold instead of overflowing: "older than
3,000 years" is a valid question whose answer is "nothing".
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

AGE_FORMS = "a whole number and a unit: s, m, h, d or w (e.g. 30d)"
EARLIEST = datetime.min.replace(tzinfo=UTC)
_AGE = re.compile(r"\s*([0-9]{1,12})\s*([smhdw])\s*", re.ASCII)
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
LONGEST = timedelta(days=3_652_425)
"""10,000 years: the longest age (any two moments a datetime holds are less far apart)."""


class AgeError(ValueError):
    """Text that is not an age; the message says what was given and the accepted forms."""


def parse_age(text: str, *, positive: bool = True) -> timedelta:
    """``text`` as a duration; :class:`AgeError` for anything else (a sign, a fraction, NaN, a
    unit it does not know, zero when ``positive``, more than :data:`LONGEST`)."""
    found = _AGE.fullmatch(text)
    if not found:
        raise AgeError(f"{text!r} is not an age; give {AGE_FORMS}")
    number, unit = int(found.group(1)), found.group(2)
    if positive and number == 0:
        raise AgeError(f"{text!r} is not an age; give a positive number and a unit: s, m, h, d or w (e.g. 30d)")
    seconds = number * {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}[unit]
    if seconds > LONGEST.total_seconds():
        raise AgeError(f"{text!r} is too long an age; give at most 10,000 years (e.g. 520000w)")
    return timedelta(**{_UNITS[unit]: number})


def before(now: datetime, age: timedelta) -> datetime:
    """The moment ``age`` before ``now``, or :data:`EARLIEST` when that is before the year 1."""
    try:
        return now - age
    except OverflowError:
        return EARLIEST
