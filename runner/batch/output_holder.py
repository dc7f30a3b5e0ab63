"""Who holds an output file (pid, host, task, input, journal), as every lock mechanism records
it, and the refusal that names them to the second batch that wants the same output."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def busy_message(target: object, holder: Mapping[str, Any], where: str = "") -> str:
    """The refusal of a second batch: who holds the output (pid, host, task, input, journal) and what to do."""
    known = [f"{key} {holder[key]}" for key in ("pid", "host", "task", "input", "journal") if holder.get(key) is not None]
    who = f" ({', '.join(known)})" if known else ""
    return (
        f"{target}: another batch{who} is writing this output file right now{where}; give this batch its own "
        "--output, or wait for that batch to end"
    )
