"""``runner caps show``: the shared cap ledger, read only.

A scope shared by many processes (a fan-out's batch caps) keeps its caps, spend and
reservations in a ledger (:mod:`runner.store.cap_ledger`): in the PostgreSQL store, or in
the fan-out's ``caps.sqlite3`` in its work directory. This lists each scope's caps, what was
spent, what calls in flight reserve, what workers that died still hold, and what each cap
leaves; ``--json`` for scripts. It writes nothing to the ledger.
"""

from __future__ import annotations

import difflib
import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

from runner.cli.terminal import echo_line as echo
from runner.config.specs import cap_figure
from runner.core.usage import Usage
from runner.errors import UsageError

if TYPE_CHECKING:
    from runner.store.cap_view import ScopeView

NO_LEDGER_HINT = (
    "pass --store with a fan-out's caps.sqlite3 (in its work directory) or a postgresql:// URL, "
    "or set RUNNER_STORE_URL"
)


@click.group()
def caps() -> None:
    """The shared cap ledger: caps, spend and reservations of scopes many processes share."""


@caps.command()
@click.option("--store", metavar="PATH|URL", help="The ledger: a fan-out's caps.sqlite3, or a postgresql:// URL (default: $RUNNER_STORE_URL).")
@click.option("--scope", "scopes", metavar="KEY", multiple=True, help="Only this scope (repeatable; default: every scope).")
@click.option("--json", "as_json", is_flag=True, help="JSON output: {store, scopes: [...]}.")
def show(store: str | None, scopes: tuple[str, ...], as_json: bool) -> None:
    """Per scope: caps, spent, reserved by calls in flight, held by dead workers, and what is left.

    Exit 2 when no ledger is given or found, or a --scope is not in it.
    """
    from runner.store.cap_view import scope_keys, view_scopes
    from runner.store.database import open_database

    db = open_database(ledger_target(store))
    try:
        known = scope_keys(db)
        views = view_scopes(db, chosen_scopes(scopes, known, db.where))
    finally:
        db.close()
    if as_json:
        click.echo(json.dumps({"store": db.where, "scopes": [v.as_dict() for v in views]}, indent=2))
    elif not views:
        echo(f"no cap scopes in {db.where} (a fan-out with batch caps opens one)")
    else:
        echo(f"cap ledger {db.where}")
        for view in views:
            for line in scope_lines(view):
                echo(line)


def ledger_target(given: str | None) -> str | Path:
    """``--store`` (a PostgreSQL URL, or an existing SQLite file), else ``$RUNNER_STORE_URL``."""
    from runner.store.database import is_postgres_url, redacted_url, resolve_store, store_url_from_env

    if given is None:
        if store_url_from_env() is None:
            raise UsageError(f"no cap ledger given: {NO_LEDGER_HINT}")
        return resolve_store(default=Path())  # refuses a value that is not a PostgreSQL URL
    if is_postgres_url(given):
        return given
    if "://" in given:
        raise UsageError(
            f"--store {redacted_url(given)!r} is not a PostgreSQL URL: use postgresql://USER@HOST[:PORT]/DATABASE, "
            "or the path of an SQLite file"
        )
    if not Path(given).is_file():
        raise UsageError(f"--store {given}: no such file; {NO_LEDGER_HINT}")
    return Path(given)


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
    lines.append("  entries:  " + ", ".join(f"{n} {status}" for status, n in view.entries.items()))
    return lines


def _usage_text(usage: Usage) -> str:
    return (
        f"${usage.cost_usd:.6f}, {usage.total_tokens:,} tokens ({usage.input_tokens:,} in, {usage.output_tokens:,} out), "
        f"{usage.model_calls} model call(s)"
    )


def _amount(cap: str, value: float) -> str:
    return f"${value:.6f}" if cap == "max_cost_usd" else f"{int(value):,}"
