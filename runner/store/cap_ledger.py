"""The shared cap ledger: the spend, reservations and caps of scopes many workers share.

One row per scope in ``cap_scopes`` (in the run store's PostgreSQL database, or an SQLite
file every process of one machine reaches), and one row per reservation in ``cap_entries``,
naming its holder (the process, :mod:`runner.store.cap_holders`), its owner (the run and
attempt whose call it is) and its spender (the call's task, agent and model, written with the
hold; :mod:`runner.store.cap_spenders` sums a scope by them). It is the
:class:`~runner.caps.shared.ScopeLedger` of :class:`~runner.caps.shared.SharedBudget`. Each
operation is one transaction, keyed by the reservation's id, so it is atomic on both backends
and applied once even when it is sent again after a dropped connection:

* reserve: ``UPDATE cap_scopes SET reserved_* = reserved_* + ? WHERE key = ? AND <every cap
  still allows it> RETURNING key`` and the entry ``held``: no row back means refused, and
  nothing was held; an entry already there means an earlier try committed;
* settle: the entry ``held -> settled``, ``reserved_* -= worst case, spent_* += actual``;
  an entry already settled is left alone;
* a tool call: ``spent_tool_calls + 1 <= max_tool_calls``, checked and counted at once, with
  its entry;
* take over (:meth:`CapLedger.take_over`): when a run resumes after its worker died, the
  reservations the dead worker held for that run are carried forward: ``held -> carried``,
  their worst case moved from ``reserved`` to ``spent`` (the endpoint may have billed them,
  as the run store counts them ``unsettled``). Counted once: a carried entry is never taken
  over or held again, and should its call be settled after all (the worker was cut off, not
  dead), the actual replaces the worst case. A reservation whose call the run store recorded
  before the worker died (each call's row names its reservation, and is written before the
  reservation is settled) is settled to what was recorded instead: that is what the endpoint
  billed, and what the dead worker would have settled.
* settle dead (:meth:`CapLedger.settle_dead`, ``runner caps settle-dead``): for a run that is
  never resumed, an operator settles dead holders' reservations the same way (recorded calls
  to what was recorded, calls recorded as not billed released) across the whole scope; the
  others stay held at their worst case, and live holders' entries are never touched.

The rule is :meth:`runner.caps.budget.Budget._check`'s: a call fits when ``spent + reserved
+ its worst case <= cap``; a check with nothing to add (before a row or step starts) fails
once ``spent + reserved`` has reached the cap.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from runner.config.specs import SUMMED_CAPS, Caps
from runner.core.spender import Spender
from runner.core.usage import Usage
from runner.errors import UsageError
from runner.store import cap_holders
from runner.store.cap_holders import Holder
from runner.store.connect import open_database
from runner.store.database import Database
from runner.store.group_commit import commit_now
from runner.store.schema import AddedColumn, Schema
from runner.store.store_kind import refuse_foreign_ledger

SPENDER_COLUMNS = ("task", "agent", "model")
"""The columns of an entry's :class:`~runner.core.spender.Spender`, in its fields' order."""
SCHEMA = Schema("""
CREATE TABLE IF NOT EXISTS cap_scopes (
  key TEXT PRIMARY KEY,
  max_steps {bigint},
  max_tool_calls {bigint},
  max_input_tokens {bigint},
  max_output_tokens {bigint},
  max_tokens {bigint},
  max_cost_usd {real},
  spent_input_tokens {bigint} NOT NULL DEFAULT 0,
  spent_output_tokens {bigint} NOT NULL DEFAULT 0,
  spent_cached_input_tokens {bigint} NOT NULL DEFAULT 0,
  spent_cost_usd {real} NOT NULL DEFAULT 0,
  spent_model_calls {bigint} NOT NULL DEFAULT 0,
  spent_tool_calls {bigint} NOT NULL DEFAULT 0,
  spent_reasoning_tokens {bigint} NOT NULL DEFAULT 0,
  spent_cache_write_tokens {bigint} NOT NULL DEFAULT 0,
  reserved_input_tokens {bigint} NOT NULL DEFAULT 0,
  reserved_output_tokens {bigint} NOT NULL DEFAULT 0,
  reserved_cost_usd {real} NOT NULL DEFAULT 0,
  reserved_model_calls {bigint} NOT NULL DEFAULT 0,
  created_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS cap_entries (
  scope TEXT NOT NULL,
  id TEXT NOT NULL,
  holder TEXT NOT NULL,
  run_id TEXT,
  attempt {int},
  status TEXT NOT NULL,
  input_tokens {bigint} NOT NULL DEFAULT 0,
  output_tokens {bigint} NOT NULL DEFAULT 0,
  cost_usd {real} NOT NULL DEFAULT 0,
  model_calls {bigint} NOT NULL DEFAULT 0,
  tool_calls {bigint} NOT NULL DEFAULT 0,
  spent_input_tokens {bigint},
  spent_output_tokens {bigint},
  spent_cost_usd {real},
  spent_model_calls {bigint},
  carried_by TEXT,
  created_at TEXT NOT NULL,
  settled_at TEXT,
  task TEXT,
  agent TEXT,
  model TEXT,
  PRIMARY KEY (scope, id)
);
CREATE INDEX IF NOT EXISTS cap_entries_held ON cap_entries (scope, status, run_id)
""", added=(
    AddedColumn("cap_entries", "spent_model_calls", "{bigint}"),  # the step it counted (a retried attempt counts none)
    *(AddedColumn("cap_entries", column, "TEXT") for column in SPENDER_COLUMNS),  # who spent (runner budgets)
    *(AddedColumn("cap_scopes", column, "{bigint} NOT NULL DEFAULT 0")  # the parts of the spend kept since providers report them
      for column in ("spent_reasoning_tokens", "spent_cache_write_tokens")),
))  # fmt: skip
"""The ledger's tables (:mod:`runner.store.schema`): ``cap_entries.status`` is ``held``,
``settled``, ``carried`` (taken over by the run's next attempt) or ``released``; the first
columns are what the entry holds (its worst case, or a tool-call count), ``spent_*`` what it used,
``task``, ``agent``, ``model`` its :class:`~runner.core.spender.Spender` (``NULL`` in entries
from before they were recorded)."""
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
_HELD = "input_tokens, output_tokens, cost_usd, model_calls"
_SPENT = "spent_input_tokens, spent_output_tokens, spent_cost_usd, spent_model_calls"
_WHO = ", ".join(SPENDER_COLUMNS)
_MOVE = (
    "UPDATE cap_scopes SET reserved_input_tokens = reserved_input_tokens - ?,"
    " reserved_output_tokens = reserved_output_tokens - ?, reserved_cost_usd = reserved_cost_usd - ?,"
    " reserved_model_calls = reserved_model_calls - ?,"
    " spent_input_tokens = spent_input_tokens + ?, spent_output_tokens = spent_output_tokens + ?,"
    " spent_cached_input_tokens = spent_cached_input_tokens + ?, spent_cost_usd = spent_cost_usd + ?,"
    " spent_model_calls = spent_model_calls + ?, spent_tool_calls = spent_tool_calls + ?,"
    " spent_reasoning_tokens = spent_reasoning_tokens + ?, spent_cache_write_tokens = spent_cache_write_tokens + ?"
    " WHERE key = ?"
)
"""Take held figures (:func:`_held`) out of the reservations and add spent ones (:func:`_spent`), in scope ``key``."""


@dataclass(frozen=True)
class ScopeFigures:
    """One shared scope as the ledger holds it: its caps, what was spent, what is still held,
    and how much of that is held by workers that died (their calls may have been billed)."""

    key: str
    caps: Caps
    spent: Usage
    reserved: Usage
    held_by_dead: Usage = field(default_factory=Usage)
    dead_holders: tuple[str, ...] = ()  # their labels ("host pid 1234")

    def as_dict(self) -> dict[str, Any]:
        """The batch report's ``ledger`` entry."""
        return {"scope": self.key, "caps": self.caps.as_dict(), "spent": self.spent.as_dict(),
                "reserved": self.reserved.as_dict(), "held_by_dead": self.held_by_dead.as_dict(),
                "dead_holders": list(self.dead_holders)}  # fmt: skip


Spend = tuple[Usage, Usage]
"""A scope's spend just before and just after one settlement (:meth:`CapLedger.settle`)."""
DeadState = Literal["recorded", "not_billed", "unrecorded"]
"""What the run store knows of a dead holder's reservation: the call's usage was recorded, it
was recorded as not billed, or nothing was recorded (its real amount is unknown)."""
Recorded = Callable[[str], Mapping[str, "Usage | None"]]
"""A run id -> its calls the run store recorded, by reservation (``RunStore.recorded_calls``)."""


@dataclass(frozen=True)
class DeadEntry:
    """A reservation still held by a holder known to be dead, and what the run store recorded of its call."""

    id: str
    run_id: str | None
    holder: str  # the dead holder's label ("host pid 1234")
    worst: Usage  # what it holds
    recorded: Usage | None  # what settling it would spend (the call counted): None when unknown or not billed
    state: DeadState

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "run_id": self.run_id, "holder": self.holder, "state": self.state,
                "worst": self.worst.as_dict(), "recorded": self.recorded.as_dict() if self.recorded else None}  # fmt: skip


@dataclass(frozen=True)
class DeadSettlement:
    """What :meth:`CapLedger.settle_dead` did in one scope: the dead entries (settled, released,
    or kept at their worst case) and how many entries live holders hold (left alone)."""

    key: str
    dead: tuple[DeadEntry, ...]
    live_entries: int

    def of(self, state: DeadState) -> tuple[DeadEntry, ...]:
        return tuple(e for e in self.dead if e.state == state)


class CapLedger:
    """The ``cap_scopes`` and ``cap_entries`` tables of one database (a
    :class:`~runner.caps.shared.ScopeLedger`); this process is one holder in it."""

    def __init__(self, database: Database, role: str = "cap ledger") -> None:
        """The ledger in ``database``, its tables created unless ``database`` is another
        application's (:func:`~runner.store.store_kind.refuse_foreign_ledger`; a file is best
        opened by :func:`open_cap_ledger`, which looks before anything is written)."""
        refuse_foreign_ledger(database, role)
        self.db = database
        # Each operation stays its own transaction, also in a batch's group commit: a scope's row is
        # what every worker waits on, and it is never held for a group's window.
        database.groupable = False
        self.holder = Holder()
        self._registered = False
        database.create(SCHEMA)
        database.create(cap_holders.SCHEMA)

    def open(self, key: str, caps: Caps, now: str) -> None:
        """Create scope ``key`` with ``caps`` (its shared part) unless it exists; an existing
        scope with other caps is refused (two batches must not share one key)."""
        wanted = Caps(**{name: getattr(caps, name) for name in SUMMED_CAPS})
        columns = ", ".join(SUMMED_CAPS)
        marks = ", ".join("?" for _ in SUMMED_CAPS)
        self.db.execute(
            f"INSERT INTO cap_scopes (key, {columns}, created_at) VALUES (?, {marks}, ?) ON CONFLICT (key) DO NOTHING",
            (key, *(getattr(wanted, name) for name in SUMMED_CAPS), now),
            idempotent=True,
        )
        held = self.scope(key).caps
        if held.as_dict() != wanted.as_dict():
            raise UsageError(
                f"the shared cap scope {key!r} in {self.db.where} holds caps {held.as_dict()}, this batch wants "
                f"{wanted.as_dict()}; one scope serves one batch (start a new dag run for new caps)"
            )
        self._register()

    def close(self) -> None:
        """Close the connection (on PostgreSQL this ends the holder's liveness lock)."""
        self.db.close()

    # --- the ScopeLedger operations ------------------------------------------------------

    def reserve(
        self, key: str, held: Usage, *, entry: str | None = None, owner: tuple[str, int] | None = None,
        spender: Spender | None = None,
    ) -> bool:
        """Hold ``held`` in scope ``key`` if every cap allows it, as reservation ``entry`` of
        ``owner`` (run id, attempt) for ``spender``; ``False`` if refused. Without ``entry`` (or
        with nothing to hold) it only checks."""
        conditions, params = _conditions(held)
        check = (
            "UPDATE cap_scopes SET reserved_input_tokens = reserved_input_tokens + ?,"
            " reserved_output_tokens = reserved_output_tokens + ?, reserved_cost_usd = reserved_cost_usd + ?,"
            " reserved_model_calls = reserved_model_calls + ?"
            f" WHERE key = ? AND {conditions} RETURNING key"
        )
        values = (held.input_tokens, held.output_tokens, held.cost_usd, held.model_calls, key, *params)
        if entry is None or held == Usage():
            return self.db.row(check, values, idempotent=held == Usage()) is not None
        self._register()
        run_id, attempt = owner or (None, None)

        def hold(db: Database) -> bool:
            if db.row(check, values) is None:
                return False
            db.execute(
                f"INSERT INTO cap_entries (scope, id, holder, run_id, attempt, status, {_HELD}, {_WHO}, created_at)"
                " VALUES (?, ?, ?, ?, ?, 'held', ?, ?, ?, ?, ?, ?, ?, ?)",
                (key, entry, self.holder.id, run_id, attempt, *_held(held), *_who(spender), _now()),
            )
            return True

        return self.db.atomic(hold, check=lambda db: True if self._entry(db, key, entry) else None)

    def settle(
        self, key: str, held: Usage, actual: Usage | None, *, entry: str | None = None, spender: Spender | None = None
    ) -> Spend | None:
        """Replace reservation ``entry``'s worst case by ``actual`` (``None``: the call was not
        made). Once: an entry already settled is left alone. Without ``entry``, ``held`` is
        taken out by amount (a caller from before entries). ``spender``: whose call it was, for
        an entry made here (nothing was held for it). Returns the scope's spend just before and
        after, read in the same transaction (``None`` when nothing was applied)."""
        commit_now()  # the run store's record of the call first (a batch's group commit holds it)
        if entry is None:
            spend = actual or Usage()
            self.db.execute(_MOVE, (*_held(held), *_spent(spend), key))
            return None
        return self.db.atomic(lambda db: self._settle(db, key, entry, held, actual, spender))

    def count_tool_call(self, key: str, count: int, *, entry: str | None = None) -> bool:
        """Count ``count`` tool calls unless that exceeds ``max_tool_calls``; ``False`` if it would."""
        counted = (
            "UPDATE cap_scopes SET spent_tool_calls = spent_tool_calls + ?"
            " WHERE key = ? AND (max_tool_calls IS NULL OR spent_tool_calls + ? <= max_tool_calls) RETURNING key"
        )
        if entry is None:
            return self.db.row(counted, (count, key, count)) is not None
        self._register()

        def count_once(db: Database) -> bool:
            if self._entry(db, key, entry) is not None:
                return True  # an earlier try committed
            if db.row(counted, (count, key, count)) is None:
                return False
            db.execute(
                "INSERT INTO cap_entries (scope, id, holder, status, tool_calls, created_at) VALUES (?, ?, ?, 'settled', ?, ?)",
                (key, entry, self.holder.id, count, _now()),
            )
            return True

        return self.db.atomic(count_once)

    def take_over(self, key: str, run_id: str, recorded: Mapping[str, Usage | None] | None = None) -> Usage:
        """Carry forward what dead holders still hold in scope ``key`` for run ``run_id`` (its
        next attempt is starting): their worst case moves from held to spent, except for a
        reservation the run store ``recorded`` (by its id: what the call used, ``None`` for a
        call not billed), which is settled to that. Returns what moved to spent."""
        self._register()
        return self.db.atomic(lambda db: self._take_over(db, key, run_id, recorded or {}))

    def settle_dead(self, key: str, recorded: Recorded) -> DeadSettlement:
        """Settle, in one transaction, every reservation of scope ``key`` whose holder is known
        to be dead and whose call the run store ``recorded``: to the recorded usage, or released
        when recorded as not billed. The others stay held at their worst case (never less), and
        live holders' entries are left alone."""
        return self.db.atomic(lambda db: self._settle_dead(db, key, recorded))

    def figures(self, key: str) -> tuple[Usage, Usage]:
        """``(spent, reserved)`` as the database holds them now."""
        found = self._figures(key)
        return found.spent, found.reserved

    def scope(self, key: str) -> ScopeFigures:
        """Scope ``key``'s caps and figures, with what dead holders hold (:class:`KeyError` if there is none)."""
        return read_scope(self.db, key)

    # --- internals -----------------------------------------------------------------------

    def _register(self) -> None:
        if not self._registered:
            self.holder.register(self.db, _now())
            self._registered = True

    def _figures(self, key: str) -> ScopeFigures:
        return _scope_row(self.db, key)

    def _entry(self, db: Database, key: str, entry: str) -> dict[str, Any] | None:
        return db.row(f"SELECT * FROM cap_entries WHERE scope = ? AND id = ?{db.lock_rows}", (key, entry))

    def _settle(
        self, db: Database, key: str, entry: str, held: Usage, actual: Usage | None, spender: Spender | None = None
    ) -> Spend | None:
        found = self._entry(db, key, entry)
        spend = actual or Usage()
        if found is None:  # nothing was held (a zero estimate), but the call used something
            if actual is None or spend == Usage():
                return None
            db.execute(
                f"INSERT INTO cap_entries (scope, id, holder, status, {_SPENT}, {_WHO}, created_at, settled_at)"
                " VALUES (?, ?, ?, 'settled', ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (key, entry, self.holder.id, *_held(spend), *_who(spender), _now(), _now()),
            )
            db.execute(_MOVE, (*_held(Usage()), *_spent(spend), key))
            return _spend(db, key, spend)
        if found["status"] not in ("held", "carried"):
            return None  # settled or released before: applied once
        worst = _usage(found)
        db.execute(
            "UPDATE cap_entries SET status = ?, spent_input_tokens = ?, spent_output_tokens = ?, spent_cost_usd = ?,"
            " spent_model_calls = ?, settled_at = ? WHERE scope = ? AND id = ?",
            ("settled" if actual is not None else "released", *_held(spend), _now(), key, entry),
        )
        if found["status"] == "held":
            db.execute(_MOVE, (*_held(worst), *_spent(spend), key))
            return _spend(db, key, spend)
        # carried: its worst case is in the spend already; the actual replaces it
        db.execute(_MOVE, (*_held(Usage()), *_spent(spend - worst), key))
        return _spend(db, key, spend - worst)

    def _take_over(self, db: Database, key: str, run_id: str, recorded: Mapping[str, Usage | None]) -> Usage:
        held = db.rows(
            f"SELECT id, holder, {_HELD} FROM cap_entries WHERE scope = ? AND run_id = ? AND status = 'held'"
            f" AND holder <> ?{db.lock_rows}",
            (key, run_id, self.holder.id),
        )
        gone = cap_holders.dead(db, {r["holder"] for r in held})
        dead = [r for r in held if r["holder"] in gone]
        settled = Usage()
        for found in (r for r in dead if r["id"] in recorded):  # billed and recorded before the worker died
            actual = recorded[found["id"]]
            spend = None if actual is None else actual + Usage(model_calls=int(found["model_calls"]))
            self._settle(db, key, found["id"], _usage(found), spend)
            settled += spend or Usage()
        carried = [r for r in dead if r["id"] not in recorded]
        if not carried:
            return settled
        now = _now()
        for found in carried:
            db.execute(
                "UPDATE cap_entries SET status = 'carried', carried_by = ?, settled_at = ? WHERE scope = ? AND id = ?",
                (self.holder.id, now, key, found["id"]),
            )
        total = sum((_usage(r) for r in carried), Usage())
        db.execute(_MOVE, (*_held(total), *_spent(total), key))
        return settled + total


    def _settle_dead(self, db: Database, key: str, recorded: Recorded) -> DeadSettlement:
        _scope_row(db, key)  # KeyError for an unknown scope
        dead, live = _dead_entries(db, key, recorded, lock=True)
        for entry in dead:
            if entry.state != "unrecorded":
                self._settle(db, key, entry.id, entry.worst, entry.recorded)
        return DeadSettlement(key, tuple(dead), live)


def open_cap_ledger(target: str | Path, role: str = "cap ledger") -> CapLedger:
    """The ledger in ``target`` (an SQLite file or a PostgreSQL URL). An existing file is looked
    at read-only first: another application's database, or one with a ``cap_scopes`` table of
    another shape, is refused (:class:`~runner.errors.StoreDamaged`, exit 2) with its bytes
    left as they were, not even its journal mode changed."""
    refuse_foreign_file(target, role)
    database = open_database(target, role=role)
    try:
        return CapLedger(database, role)
    except BaseException:
        database.close()
        raise


def refuse_foreign_file(target: str | Path, role: str = "cap ledger") -> None:
    """Refuse an existing SQLite file that is not runner's ledger, looked at read-only, before
    anything opens it to write (opening it to write switches its journal mode)."""
    if isinstance(target, Path) and target.is_file():
        probe = open_database(target, read_only=True, role=role)
        try:
            refuse_foreign_ledger(probe, role)
        finally:
            probe.close()


def dead_entries(db: Database, key: str, recorded: Recorded) -> list[DeadEntry]:
    """Scope ``key``'s reservations held by dead holders, each with what the run store
    ``recorded`` of its call; it only reads."""
    return _dead_entries(db, key, recorded, lock=False)[0]


def _dead_entries(db: Database, key: str, recorded: Recorded, *, lock: bool) -> tuple[list[DeadEntry], int]:
    """The dead holders' held entries of scope ``key`` and how many entries live holders hold."""
    held = db.rows(
        f"SELECT id, holder, run_id, {_HELD} FROM cap_entries WHERE scope = ? AND status = 'held' ORDER BY created_at, id"
        f"{db.lock_rows if lock else ''}",
        (key,),
    )
    gone = cap_holders.dead(db, {r["holder"] for r in held})
    calls: dict[str, Mapping[str, Usage | None]] = {}
    found = []
    for row in (r for r in held if r["holder"] in gone):
        run_id = row["run_id"]
        known = calls.setdefault(run_id, recorded(run_id)) if run_id else {}
        worst = _usage(row)
        if row["id"] not in known:
            found.append(DeadEntry(row["id"], run_id, gone[row["holder"]], worst, None, "unrecorded"))
            continue
        actual = known[row["id"]]  # as the take-over settles it: the call counted, its usage as recorded
        spend = None if actual is None else actual + Usage(model_calls=int(row["model_calls"]))
        found.append(DeadEntry(row["id"], run_id, gone[row["holder"]], worst, spend, "not_billed" if spend is None else "recorded"))
    return found, len(held) - len(found)


def read_scope(db: Database, key: str) -> ScopeFigures:
    """Scope ``key`` of the ledger in ``db``: caps, figures and what dead holders hold; it only
    reads (:class:`KeyError` if there is no such scope)."""
    found = _scope_row(db, key)
    held = db.rows(f"SELECT holder, {_sums()} FROM cap_entries WHERE scope = ? AND status = 'held' GROUP BY holder", (key,))
    gone = cap_holders.dead(db, {r["holder"] for r in held})
    by_dead = sum((_usage(r) for r in held if r["holder"] in gone), Usage())
    return ScopeFigures(found.key, found.caps, found.spent, found.reserved, by_dead, tuple(sorted(gone.values())))


def _scope_row(db: Database, key: str) -> ScopeFigures:
    row = db.row("SELECT * FROM cap_scopes WHERE key = ?", (key,))
    if row is None:
        raise KeyError(key)
    caps = Caps(**{name: _number(row[name]) for name in SUMMED_CAPS})  # type: ignore[arg-type]
    spent = Usage(
        int(row["spent_input_tokens"]), int(row["spent_output_tokens"]), int(row["spent_cached_input_tokens"]),
        float(row["spent_cost_usd"]), int(row["spent_model_calls"]), int(row["spent_tool_calls"]),
        int(row["spent_reasoning_tokens"]), int(row["spent_cache_write_tokens"]),
    )  # fmt: skip
    reserved = Usage(
        int(row["reserved_input_tokens"]), int(row["reserved_output_tokens"]), 0, float(row["reserved_cost_usd"]),
        int(row["reserved_model_calls"]),
    )  # fmt: skip
    return ScopeFigures(key, caps, spent, reserved)


def _spend(db: Database, key: str, added: Usage) -> Spend:
    """Scope ``key``'s spend after ``added`` was added to it (in the transaction that added it), and before."""
    after = _scope_row(db, key).spent
    return after - added, after


def _conditions(held: Usage) -> tuple[str, list[float]]:
    conditions, params = [], []
    for cap, used, added in _LIMITS:
        extra = added(held)
        if extra > 0 or cap == "max_steps":
            conditions.append(f"({cap} IS NULL OR {used} + ? <= {cap})")
            params.append(extra)
        else:  # nothing to add: refused once the cap is reached
            conditions.append(f"({cap} IS NULL OR {used} < {cap})")
    return " AND ".join(conditions), params


def _held(usage: Usage) -> tuple[Any, ...]:
    """The four figures of ``usage`` in the ledger's column order: an entry's reservation
    (``held_*``), its spend (``spent_*``, :data:`_SPENT`), or a scope's."""
    return usage.input_tokens, usage.output_tokens, usage.cost_usd, usage.model_calls


def _who(spender: Spender | None) -> tuple[str | None, ...]:
    """An entry's spender columns (:data:`SPENDER_COLUMNS`)."""
    found = spender or Spender()
    return found.task, found.agent, found.model


def _spent(usage: Usage) -> tuple[Any, ...]:
    """What :data:`_MOVE` adds to a scope's spend, in its column order."""
    return (usage.input_tokens, usage.output_tokens, usage.cached_input_tokens, usage.cost_usd, usage.model_calls,
            usage.tool_calls, usage.reasoning_tokens, usage.cache_write_tokens)  # fmt: skip


def _sums() -> str:
    return ", ".join(f"COALESCE(SUM({c}), 0) AS {c}" for c in _HELD.split(", "))


def _usage(row: dict[str, Any]) -> Usage:
    """The worst case an entry holds (or, summed, several do)."""
    return Usage(int(row["input_tokens"]), int(row["output_tokens"]), 0, float(row["cost_usd"]), int(row["model_calls"]))


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def _number(value: Any) -> int | float | None:
    if value is None:
        return None
    return value if isinstance(value, float) else int(value)
