"""The shared cap ledger: the spend, reservations and caps of scopes many workers share.

One row per scope in ``cap_scopes`` (in the run store's PostgreSQL database, or an SQLite
file every process of one machine reaches). It is the :class:`~runner.caps.shared.ScopeLedger`
of :class:`~runner.caps.shared.SharedBudget`; every operation is one statement, so it is
atomic on both backends:

* reserve: ``UPDATE cap_scopes SET reserved_* = reserved_* + ? WHERE key = ? AND <every cap
  still allows it> RETURNING key``: no row back means refused, and nothing was held;
* settle: ``reserved_* = reserved_* - held, spent_* = spent_* + actual``;
* a tool call: ``spent_tool_calls + 1 <= max_tool_calls``, checked and counted at once.

The rule is :meth:`runner.caps.budget.Budget._check`'s: a call fits when ``spent + reserved
+ its worst case <= cap``; a check with nothing to add (before a row or step starts) fails
once ``spent + reserved`` has reached the cap.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from runner.config.specs import SUMMED_CAPS, Caps
from runner.core.usage import Usage
from runner.errors import UsageError
from runner.store.database import Database, SqliteDatabase

_SCHEMA = """
CREATE TABLE IF NOT EXISTS cap_scopes (
  key TEXT PRIMARY KEY,
  max_steps BIGINT,
  max_tool_calls BIGINT,
  max_input_tokens BIGINT,
  max_output_tokens BIGINT,
  max_tokens BIGINT,
  max_cost_usd {real},
  spent_input_tokens BIGINT NOT NULL DEFAULT 0,
  spent_output_tokens BIGINT NOT NULL DEFAULT 0,
  spent_cached_input_tokens BIGINT NOT NULL DEFAULT 0,
  spent_cost_usd {real} NOT NULL DEFAULT 0,
  spent_model_calls BIGINT NOT NULL DEFAULT 0,
  spent_tool_calls BIGINT NOT NULL DEFAULT 0,
  reserved_input_tokens BIGINT NOT NULL DEFAULT 0,
  reserved_output_tokens BIGINT NOT NULL DEFAULT 0,
  reserved_cost_usd {real} NOT NULL DEFAULT 0,
  reserved_model_calls BIGINT NOT NULL DEFAULT 0,
  created_at TEXT NOT NULL
)
"""
_LIMITS: tuple[tuple[str, str, Callable[[Usage], float]], ...] = (
    ("max_steps", "spent_model_calls + reserved_model_calls", lambda u: u.model_calls),
    ("max_input_tokens", "spent_input_tokens + reserved_input_tokens", lambda u: u.input_tokens),
    ("max_output_tokens", "spent_output_tokens + reserved_output_tokens", lambda u: u.output_tokens),
    (
        "max_tokens",
        "spent_input_tokens + spent_output_tokens + reserved_input_tokens + reserved_output_tokens",
        lambda u: u.input_tokens + u.output_tokens,
    ),
    ("max_cost_usd", "spent_cost_usd + reserved_cost_usd", lambda u: u.cost_usd),
)
"""Each cap a reservation is checked against: (cap column, what it limits, what the call adds)."""


@dataclass(frozen=True)
class ScopeFigures:
    """One shared scope as the ledger holds it: its caps, what was spent, what is still held."""

    key: str
    caps: Caps
    spent: Usage
    reserved: Usage

    def as_dict(self) -> dict[str, Any]:
        """The batch report's ``ledger`` entry."""
        return {"scope": self.key, "caps": self.caps.as_dict(), "spent": self.spent.as_dict(),
                "reserved": self.reserved.as_dict()}  # fmt: skip


class CapLedger:
    """The ``cap_scopes`` table of one database (a :class:`~runner.caps.shared.ScopeLedger`)."""

    def __init__(self, database: Database) -> None:
        self.db = database
        real = "REAL" if isinstance(database, SqliteDatabase) else "DOUBLE PRECISION"
        database.script(_SCHEMA.format(real=real))

    def open(self, key: str, caps: Caps, now: str) -> None:
        """Create scope ``key`` with ``caps`` (its shared part) unless it exists; an existing
        scope with other caps is refused (two batches must not share one key)."""
        wanted = Caps(**{name: getattr(caps, name) for name in SUMMED_CAPS})
        columns = ", ".join(SUMMED_CAPS)
        marks = ", ".join("?" for _ in SUMMED_CAPS)
        self.db.execute(
            f"INSERT INTO cap_scopes (key, {columns}, created_at) VALUES (?, {marks}, ?) ON CONFLICT (key) DO NOTHING",
            (key, *(getattr(wanted, name) for name in SUMMED_CAPS), now),
        )
        held = self.scope(key).caps
        if held.as_dict() != wanted.as_dict():
            raise UsageError(
                f"the shared cap scope {key!r} in {self.db.where} holds caps {held.as_dict()}, this batch wants "
                f"{wanted.as_dict()}; one scope serves one batch (start a new dag run for new caps)"
            )

    def reserve(self, key: str, held: Usage) -> bool:
        conditions, params = [], []
        for cap, used, added in _LIMITS:
            extra = added(held)
            if extra > 0 or cap == "max_steps":
                conditions.append(f"({cap} IS NULL OR {used} + ? <= {cap})")
                params.append(extra)
            else:  # nothing to add: refused once the cap is reached
                conditions.append(f"({cap} IS NULL OR {used} < {cap})")
        found = self.db.row(
            "UPDATE cap_scopes SET reserved_input_tokens = reserved_input_tokens + ?,"
            " reserved_output_tokens = reserved_output_tokens + ?, reserved_cost_usd = reserved_cost_usd + ?,"
            " reserved_model_calls = reserved_model_calls + ?"
            f" WHERE key = ? AND {' AND '.join(conditions)} RETURNING key",
            (held.input_tokens, held.output_tokens, held.cost_usd, held.model_calls, key, *params),
        )
        return found is not None

    def settle(self, key: str, held: Usage, actual: Usage | None) -> None:
        spend = actual or Usage()
        self.db.execute(
            "UPDATE cap_scopes SET reserved_input_tokens = reserved_input_tokens - ?,"
            " reserved_output_tokens = reserved_output_tokens - ?, reserved_cost_usd = reserved_cost_usd - ?,"
            " reserved_model_calls = reserved_model_calls - ?,"
            " spent_input_tokens = spent_input_tokens + ?, spent_output_tokens = spent_output_tokens + ?,"
            " spent_cached_input_tokens = spent_cached_input_tokens + ?, spent_cost_usd = spent_cost_usd + ?,"
            " spent_model_calls = spent_model_calls + ?, spent_tool_calls = spent_tool_calls + ?"
            " WHERE key = ?",
            (
                held.input_tokens, held.output_tokens, held.cost_usd, held.model_calls,
                spend.input_tokens, spend.output_tokens, spend.cached_input_tokens, spend.cost_usd,
                spend.model_calls, spend.tool_calls, key,
            ),
        )  # fmt: skip

    def count_tool_call(self, key: str, count: int) -> bool:
        found = self.db.row(
            "UPDATE cap_scopes SET spent_tool_calls = spent_tool_calls + ?"
            " WHERE key = ? AND (max_tool_calls IS NULL OR spent_tool_calls + ? <= max_tool_calls) RETURNING key",
            (count, key, count),
        )
        return found is not None

    def figures(self, key: str) -> tuple[Usage, Usage]:
        found = self.scope(key)
        return found.spent, found.reserved

    def scope(self, key: str) -> ScopeFigures:
        """Scope ``key``'s caps and figures (:class:`KeyError` if there is none)."""
        row = self.db.row("SELECT * FROM cap_scopes WHERE key = ?", (key,))
        if row is None:
            raise KeyError(key)
        caps = Caps(**{name: _number(row[name]) for name in SUMMED_CAPS})  # type: ignore[arg-type]
        spent = Usage(
            int(row["spent_input_tokens"]), int(row["spent_output_tokens"]), int(row["spent_cached_input_tokens"]),
            float(row["spent_cost_usd"]), int(row["spent_model_calls"]), int(row["spent_tool_calls"]),
        )  # fmt: skip
        reserved = Usage(
            int(row["reserved_input_tokens"]), int(row["reserved_output_tokens"]), 0, float(row["reserved_cost_usd"]),
            int(row["reserved_model_calls"]),
        )  # fmt: skip
        return ScopeFigures(key, caps, spent, reserved)


def _number(value: Any) -> int | float | None:
    if value is None:
        return None
    return value if isinstance(value, float) else int(value)
