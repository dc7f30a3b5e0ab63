"""``runner caps show`` and ``runner caps settle-dead``: the shared cap ledger.

A scope shared by many processes (a fan-out's batch caps) keeps its caps, spend and
reservations in a ledger (:mod:`runner.store.cap_ledger`): in the PostgreSQL store, or in
the fan-out's ``caps.sqlite3`` in its work directory (found by :mod:`runner.cli.caps_locate`).
``show`` lists each scope's caps, what was spent, what calls in flight reserve, what workers
that died still hold (and which of those calls the run store recorded), and what each cap
leaves; ``--json`` for scripts. It writes nothing: an SQLite ledger is opened read-only.
``settle-dead`` settles dead workers' reservations whose calls were recorded, for runs that
are never resumed.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import click

from runner.cli.json_output import echo_json
from runner.cli.terminal import echo_line as echo
from runner.config.specs import cap_figure
from runner.core.usage import Usage
from runner.errors import UsageError

if TYPE_CHECKING:
    from runner.store.cap_ledger import DeadSettlement, DeadState
    from runner.store.cap_view import ScopeView



@click.group()
def caps() -> None:
    """The shared cap ledger: caps, spend and reservations of scopes many processes share."""


STORE_HELP = ("The ledger: a fan-out's caps.sqlite3, or a postgresql:// URL (default: $RUNNER_STORE_URL, else the one "
              "caps.sqlite3 under $RUNNER_AIRFLOW_WORK_DIR).")  # fmt: skip
RUNS_HELP = ("The run store that recorded the calls: an SQLite file or a postgresql:// URL (default: the ledger's own "
             "database when it has one, else <root>/.runner/runs.sqlite3).")  # fmt: skip
ROOT_HELP = "Project root (for its run store)."


def ledger_options(command: Callable[..., None]) -> Callable[..., None]:
    """The options both subcommands take: which ledger, which scopes, which run store, and JSON."""
    for option in reversed([
        click.option("--store", metavar="PATH|URL", help=STORE_HELP),
        click.option("--scope", "scopes", metavar="KEY", multiple=True, help="Only this scope (repeatable; default: every scope)."),
        click.option("--runs", metavar="PATH|URL", help=RUNS_HELP),
        click.option("--root", type=click.Path(exists=True, file_okay=False, path_type=Path), default=".", help=ROOT_HELP),
        click.option("--json", "as_json", is_flag=True, help="JSON output: {store, runs, scopes: [...]}."),
    ]):
        command = option(command)
    return command


@caps.command()
@ledger_options
def show(store: str | None, scopes: tuple[str, ...], runs: str | None, root: Path, as_json: bool) -> None:
    """Per scope: caps, spent, reserved by calls in flight, held by dead workers (and which of
    their calls the run store recorded), and what is left. Reads only.

    Exit 2 when no ledger is given or found, or a --scope is not in it.
    """
    from runner.cli.caps_locate import ledger_target, run_store_lookup
    from runner.store.cap_view import scope_keys, view_scopes
    from runner.store.connect import open_database
    from runner.store.store_kind import refuse_foreign_ledger

    db = open_database(ledger_target(store), read_only=True, role="cap ledger")
    try:
        refuse_foreign_ledger(db)
        chosen = chosen_scopes(scopes, scope_keys(db), db.where)
        recorded = run_store_lookup(db, runs, root)
        try:
            views = view_scopes(db, chosen, recorded)
        finally:
            recorded.close()
    finally:
        db.close()
    if as_json:
        echo_json({"store": db.where, "runs": recorded.where, "scopes": [v.as_dict() for v in views]})
    elif not views:
        echo(f"no cap scopes in {db.where} (a fan-out with batch caps opens one)")
    else:
        echo(f"cap ledger {db.where}" + (f" (calls recorded in {recorded.where})" if recorded.where else " (no run store found)"))
        for view in views:
            for line in scope_lines(view):
                echo(line)


@caps.command("settle-dead")
@ledger_options
def settle_dead(store: str | None, scopes: tuple[str, ...], runs: str | None, root: Path, as_json: bool) -> None:
    """Settle reservations held by dead workers whose calls the run store recorded: to the
    recorded usage, or released when recorded as not billed. Unrecorded ones stay at their
    worst case; live workers' reservations are never touched.

    Exit 2 when no ledger is given or found, or a --scope is not in it.
    """
    from runner.cli.caps_locate import ledger_target, run_store_lookup
    from runner.store.cap_ledger import CapLedger, refuse_foreign_file
    from runner.store.cap_view import has_ledger, scope_keys
    from runner.store.connect import open_database
    from runner.store.store_kind import refuse_foreign_ledger

    target = ledger_target(store)
    refuse_foreign_file(target)  # before it is opened to write
    db = open_database(target, role="cap ledger")
    try:
        refuse_foreign_ledger(db)  # a PostgreSQL database's cap_scopes of another shape
        if not has_ledger(db):  # refused before CapLedger would create its tables
            raise UsageError(f"{db.where} holds no cap ledger (a fan-out with batch caps opens one)")
        chosen = chosen_scopes(scopes, scope_keys(db), db.where)
        recorded = run_store_lookup(db, runs, root)
        try:
            ledger = CapLedger(db)
            done = [ledger.settle_dead(key, recorded) for key in chosen]
        finally:
            recorded.close()
    finally:
        db.close()
    if as_json:
        echo_json({"store": db.where, "runs": recorded.where, "scopes": [settlement_dict(d) for d in done]})
        return
    echo(f"cap ledger {db.where}" + (f" (calls recorded in {recorded.where})" if recorded.where else
                                     " (no run store found: nothing is known to be recorded; pass --runs)"))  # fmt: skip
    for settlement in done:
        for line in settlement_lines(settlement):
            echo(line)


def chosen_scopes(wanted: tuple[str, ...], known: list[str], where: str) -> list[str]:
    """The ``--scope`` keys (each once), or every scope in the ledger; a key not in it is refused."""
    for key in wanted:
        if key in known:
            continue
        if not known:
            raise UsageError(f"--scope {key!r}: {where} holds no cap scopes")
        close = difflib.get_close_matches(key, known, n=3)
        hint = f"did you mean {', '.join(repr(k) for k in close)}?" if close else "`runner caps show` lists them"
        raise UsageError(f"--scope {key!r}: no such scope in {where}; {hint}")
    return list(dict.fromkeys(wanted)) or known


def scope_lines(view: ScopeView) -> list[str]:
    """One scope as text: a table of its caps, then its totals, dead holders and entries."""
    figures, left = view.figures, view.left()
    lines = [f"scope {view.key}  (opened {view.created_at})"]
    if left:
        lines.append(f"  {'cap':<18} {'limit':>14} {'spent':>14} {'reserved':>14} {'left':>14}")
    for cap in left:
        row = (getattr(figures.caps, cap), cap_figure(cap, figures.spent), cap_figure(cap, figures.reserved), left[cap])
        lines.append(f"  {cap:<18} " + " ".join(f"{_amount(cap, value):>14}" for value in row))
    lines.append(f"  spent:    {_usage_text(figures.spent)}, {figures.spent.tool_calls} tool call(s)")
    lines.append(f"  reserved: {_usage_text(figures.reserved)} in flight")
    dead = figures.held_by_dead
    if dead.model_calls or dead.cost_usd:
        lines.append(
            f"  held by dead workers ({', '.join(figures.dead_holders)}): {dead.model_calls} model call(s), "
            f"${dead.cost_usd:.6f} at their worst case (counted until their rows' runs resume)"
        )
    lines.extend(_dead_lines(view))
    lines.append("  entries:  " + ", ".join(f"{n} {status}" for status, n in view.entries.items()))
    return lines


def _usage_text(usage: Usage) -> str:
    parts = [f"{usage.input_tokens:,} in", f"{usage.output_tokens:,} out"]
    parts += [f"{usage.reasoning_tokens:,} of the output reasoning"] if usage.reasoning_tokens else []
    parts += [f"{usage.cache_write_tokens:,} of the input written to the cache"] if usage.cache_write_tokens else []
    return f"${usage.cost_usd:.6f}, {usage.total_tokens:,} tokens ({', '.join(parts)}), {usage.model_calls} model call(s)"


def _amount(cap: str, value: float) -> str:
    return f"${value:.6f}" if cap == "max_cost_usd" else f"{int(value):,}"


def _dead_lines(view: ScopeView) -> list[str]:
    """Which dead reservations the run store recorded (their real amount is known)."""
    known = [e for e in view.dead if e.state != "unrecorded"]
    if not known:
        return []
    actual = sum((e.recorded or Usage() for e in known), Usage())
    worst = sum((e.worst for e in known), Usage())
    return [f"    recorded in the run store: {len(known)} of them, ${actual.cost_usd:.6f} actual (${worst.cost_usd:.6f} "
            "held): `runner caps settle-dead` settles them to it"]  # fmt: skip


def settlement_lines(done: DeadSettlement) -> list[str]:
    """What ``settle-dead`` did in one scope, as text."""
    settled, released, kept = done.of("recorded"), done.of("not_billed"), done.of("unrecorded")
    lines = [f"scope {done.key}"]
    if settled:
        actual = sum((e.recorded or Usage() for e in settled), Usage())
        worst = sum((e.worst for e in settled), Usage())
        lines.append(f"  settled {len(settled)} dead reservation(s) to the recorded usage: ${actual.cost_usd:.6f} "
                     f"(held ${worst.cost_usd:.6f})")  # fmt: skip
    if released:
        lines.append(f"  released {len(released)} dead reservation(s) recorded as not billed "
                     f"(held ${sum((e.worst for e in released), Usage()).cost_usd:.6f})")  # fmt: skip
    if kept:
        lines.append(f"  kept {len(kept)} dead reservation(s) at their worst case "
                     f"(${sum((e.worst for e in kept), Usage()).cost_usd:.6f}): the run store has no record of their calls")  # fmt: skip
    if done.live_entries:
        lines.append(f"  left {done.live_entries} reservation(s) of live workers alone")
    if len(lines) == 1:
        lines.append("  nothing held by dead workers")
    return lines


def settlement_dict(done: DeadSettlement) -> dict[str, object]:
    """What ``settle-dead --json`` says of one scope."""
    names: dict[DeadState, str] = {"recorded": "settled", "not_billed": "released", "unrecorded": "kept"}
    found: dict[str, object] = {"scope": done.key}
    for state, name in names.items():
        found[name] = [e.as_dict() for e in done.of(state)]
    return {**found, "live_entries": done.live_entries}
