"""How numbers, money, durations and cells are written in every report format."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from datetime import datetime
from typing import Any


def usd(value: float | None) -> str:
    """US dollars: 6 decimals below a cent, 4 otherwise (``$0.000420``, ``$1.2345``)."""
    if value is None:
        return "—"
    decimals = 6 if 0 < abs(value) < 0.01 else 4
    return f"${value:,.{decimals}f}"


def count(value: float | None) -> str:
    """An integer count with thousands separators."""
    return "—" if value is None else f"{int(value):,}"


def seconds(value: float | None) -> str:
    """A duration for a person: ``0.42 s``, ``12.3 s``, ``4 m 05 s``, ``2 h 03 m``."""
    if value is None:
        return "—"
    if value < 10:
        return f"{value:.2f} s"
    if value < 60:
        return f"{value:.1f} s"
    minutes, secs = divmod(round(value), 60)
    if minutes < 60:
        return f"{minutes} m {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} m"


def timestamp(value: str | None) -> str:
    """An ISO 8601 timestamp to the second, with its offset (``2026-11-30 06:00:12 +00:00``)."""
    if not value:
        return "—"
    moment = datetime.fromisoformat(value)
    offset = moment.strftime("%z")
    offset = "UTC" if offset in ("+0000", "") else f"{offset[:3]}:{offset[3:]}"
    return f"{moment:%Y-%m-%d %H:%M:%S} {offset}"


def rate(value: float | None) -> str:
    """A fraction as a percentage (``42.0%``); ``—`` when unknown."""
    return "—" if value is None else f"{100 * value:.1f}%"


def percent(part: float, whole: float) -> str:
    """``part`` as a share of ``whole`` (``12.5%``); ``—`` when ``whole`` is 0."""
    return "—" if not whole else f"{100 * part / whole:.1f}%"


def is_number(value: Any) -> bool:
    """True for ints and floats, not for booleans."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def cell(value: Any) -> str:
    """A table cell: numbers with separators, JSON for nested values, '' for null."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        if value.is_integer() and abs(value) < 1e15:
            return f"{value:,.0f}"
        return f"{value:,.2f}" if abs(value) >= 1 else f"{value:.4g}"
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def number_column(values: list[Any]) -> list[str]:
    """Cells of a numeric column, every number with the same decimals (at most 4).

    ``[52310.5, 47120.0]`` -> ``["52,310.50", "47,120.00"]``; nulls become ''. Non-numeric
    values fall back to :func:`cell`.
    """
    decimals = max((_decimals(v) for v in values if isinstance(v, float)), default=0)
    return [f"{value:,.{decimals}f}" if is_number(value) and math.isfinite(value) else cell(value) for value in values]


def _decimals(value: float) -> int:
    if not math.isfinite(value):
        return 0
    text = repr(value)
    return 4 if "e" in text else min(len(text.partition(".")[2].rstrip("0")), 4)


def excerpt(text: str | None, limit: int) -> str:
    """``text`` cut to ``limit`` characters, saying how much was left out."""
    if not text:
        return ""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n… ({len(text) - limit:,} more characters)"


def humanize(identifier: str) -> str:
    """``revenue_by_region`` -> ``Revenue by region``."""
    words = identifier.replace("_", " ").replace("-", " ").strip()
    return words[:1].upper() + words[1:]


CURRENCY_SYMBOLS = {"USD": "$", "EUR": "€", "GBP": "£", "JPY": "¥", "CNY": "¥", "INR": "₹", "CHF": "CHF ", "CAD": "CA$", "AUD": "A$"}
DEFAULT_DECIMALS = {"number": 2, "currency": 2, "percent": 1, "integer": 0}


def styled(value: Any, style: Mapping[str, Any]) -> str:
    """A cell written as its column's declared format (``report.columns``): ``currency``
    (``$52,310.50``), ``percent`` (0.042 -> ``4.2%``), ``integer``, ``number``, ``date``
    (the date part of an ISO timestamp), ``text``. Values of another kind fall back to :func:`cell`."""
    kind = style.get("format")
    decimals = style.get("decimals")
    decimals = DEFAULT_DECIMALS.get(str(kind), 2) if decimals is None else int(decimals)
    if value is None:
        return ""
    if kind == "date" and isinstance(value, str):
        return value[:10] if len(value) >= 10 and value[4:5] == "-" and value[7:8] == "-" else value
    if kind == "text" or not is_number(value) or not math.isfinite(value):
        return cell(value)
    if kind == "integer":
        return f"{round(value):,}"
    if kind == "percent":
        return f"{value * 100:,.{decimals}f}%"
    if kind == "currency":
        code = str(style.get("currency") or "USD")
        symbol = CURRENCY_SYMBOLS.get(code, f"{code} ")
        return f"{'-' if value < 0 else ''}{symbol}{abs(value):,.{decimals}f}"
    if kind == "number":
        return f"{value:,.{decimals}f}"
    return cell(value)
