"""Who spent in a scope of the shared cap ledger: its entries summed by task, agent and model.

What ``runner budgets`` breaks a budget's window down by. Each entry records its
:class:`~runner.core.spender.Spender` in the transaction that holds it
(:mod:`runner.store.cap_ledger`), and counts here as it counts in the scope's figures: a
settled entry at what its call used, a carried one (its worker died and the run's next
attempt took it over) at its worst case, a held one as reserved, a released one not at all.
So a scope's spenders add up to its spent and reserved figures, after crashes and take-overs
too, whichever worker settled each call. It only reads; in a ledger from before spenders
were recorded (read as it is, never altered) those entries count for an unknown spender.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from runner.core.spender import Spender
from runner.core.usage import Usage
from runner.store.cap_ledger import SPENDER_COLUMNS
from runner.store.database import Database

_SPENT = (  # (a Usage field, the entry's column of what its call used, of what it holds)
    ("input_tokens", "spent_input_tokens", "input_tokens"),
    ("output_tokens", "spent_output_tokens", "output_tokens"),
    ("cost_usd", "spent_cost_usd", "cost_usd"),
    ("model_calls", "spent_model_calls", "model_calls"),
)


@dataclass(frozen=True)
class SpenderFigures:
    """What one spender spent (settled and carried entries) and still holds (calls in flight) in one scope."""

    spender: Spender
    spent: Usage
    reserved: Usage


def spenders(db: Database, key: str) -> list[SpenderFigures]:
    """Scope ``key``'s spenders, the largest spend first; those with nothing spent or held
    (only calls not billed) are left out (none when ``db`` holds no ledger entries)."""
    columns = db.columns("cap_entries")
    if not columns:
        return []
    who = ", ".join(c if c in columns else f"CAST(NULL AS TEXT) AS {c}" for c in SPENDER_COLUMNS)
    rows = db.rows(f"SELECT {who}, {_sums(columns)} FROM cap_entries WHERE scope = ? GROUP BY 1, 2, 3", (key,))
    found = [_figures(row) for row in rows]
    kept = [f for f in found if f.spent != Usage() or f.reserved != Usage()]
    return sorted(kept, key=_largest_first)


def _sums(columns: set[str]) -> str:
    parts = []
    for name, spent, worst in _SPENT:
        used = f"COALESCE({spent}, {'model_calls' if name == 'model_calls' else 0})" if spent in columns else worst
        parts.append(f"SUM(CASE status WHEN 'settled' THEN {used} WHEN 'carried' THEN {worst} ELSE 0 END) AS spent_{name}")
        parts.append(f"SUM(CASE status WHEN 'held' THEN {worst} ELSE 0 END) AS reserved_{name}")
    return ", ".join(parts)


def _figures(row: dict[str, Any]) -> SpenderFigures:
    def usage(prefix: str) -> Usage:  # PostgreSQL sums integers as numeric: int() and float() make them plain
        return Usage(
            input_tokens=int(row[f"{prefix}_input_tokens"] or 0), output_tokens=int(row[f"{prefix}_output_tokens"] or 0),
            cost_usd=float(row[f"{prefix}_cost_usd"] or 0), model_calls=int(row[f"{prefix}_model_calls"] or 0),
        )

    spender = Spender(*(None if row[c] is None else str(row[c]) for c in SPENDER_COLUMNS))
    return SpenderFigures(spender, usage("spent"), usage("reserved"))


def _largest_first(figures: SpenderFigures) -> tuple[float, int, float, str, str, str]:
    s = figures.spender
    return (-figures.spent.cost_usd, -figures.spent.total_tokens, -figures.reserved.cost_usd,
            s.task or "", s.agent or "", s.model or "")  # fmt: skip
