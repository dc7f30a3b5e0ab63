"""``runner budgets``: what each budget over time (``budgets.d/``) has spent and reserved in
its current and last windows, and what is left.

The figures are the budgets' scopes in the shared cap ledger (:mod:`runner.runs.budget_scopes`):
the shared PostgreSQL store (``--store-url``, ``$RUNNER_STORE_URL``), else
``<state dir>/budgets.sqlite3``. It only reads: an SQLite ledger is opened read-only, and a
window nobody has spent in yet shows zero.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from runner.cli.terminal import echo_line as echo

if TYPE_CHECKING:
    from runner.caps.windows import Window
    from runner.config.budgets import BudgetSpec
    from runner.store.database import Database


@click.command()
@click.option(
    "--root", type=click.Path(exists=True, file_okay=False, path_type=Path), default=".", help="Project root."
)
@click.option(
    "--store-url",
    metavar="URL",
    help="The shared PostgreSQL store (default: $RUNNER_STORE_URL, else <root>/.runner/budgets.sqlite3).",
)
@click.option(
    "--json", "as_json", is_flag=True, help="JSON output: {ledger, budgets: [{name, window, current, last}]}."
)
def budgets(root: Path, store_url: str | None, as_json: bool) -> None:
    """Per budget: its limits, and spent, reserved (calls in flight) and left in the current
    and the last window. Reads only. Exit 2 when the project does not load, or the ledger is
    damaged or another application's file (named; it is left as it was)."""
    from runner.config.project import load_project_or_raise
    from runner.runs.budget_scopes import ledger_target
    from runner.store.database import open_database
    from runner.store.store_kind import refuse_foreign_ledger

    project = load_project_or_raise(root.resolve())
    target = ledger_target(project.root, store_url)
    now = datetime.now(UTC)
    db = open_database(target, read_only=True, role="budget ledger") if _exists(target) else None
    try:
        if db is not None:
            refuse_foreign_ledger(db, "budget ledger")
        shown = [_budget(db, spec, now) for spec in project.budgets.values()]
    finally:
        if db is not None:
            db.close()
    where = db.where if db is not None else str(target)
    if as_json:
        click.echo(json.dumps({"ledger": where, "budgets": shown}, indent=2))
        return
    if not shown:
        echo("no budgets (add kind: Budget documents to budgets.d/)")
        return
    echo(f"budget ledger {where}")
    for item in shown:
        limits = ", ".join(f"{k}={v}" for k, v in item["limits"].items())
        echo(f"budget {item['name']}  ({item['window']} in {item['timezone']}; {limits}; {item['scope']})")
        for label in ("current", "last"):
            w = item[label]
            left = ", ".join(f"{k} {_fmt(k, v)}" for k, v in w["left"].items())
            echo(f"  {label:8} {w['start']} .. {w['end']}: spent ${w['spent']['cost_usd']:.6f} "
                 f"({w['spent']['tokens']} tokens, {w['spent']['model_calls']} calls), "
                 f"reserved ${w['reserved']['cost_usd']:.6f}; left: {left}")  # fmt: skip


def _exists(target: str | Path) -> bool:
    return not isinstance(target, Path) or target.exists()


def _budget(db: Database | None, spec: BudgetSpec, now: datetime) -> dict[str, Any]:
    from runner.caps.windows import previous_window, window_at

    current = window_at(spec, now)
    limits = {k: v for k, v in (("max_cost_usd", spec.max_cost_usd), ("max_tokens", spec.max_tokens)) if v is not None}
    return {
        "name": spec.name, "window": spec.window_name, "timezone": "UTC" if isinstance(spec.window, int) else spec.timezone,
        "scope": spec.scope_text(), "limits": limits,
        "current": _window(db, spec, current), "last": _window(db, spec, previous_window(spec, current)),
    }  # fmt: skip


def _window(db: Database | None, spec: BudgetSpec, window: Window) -> dict[str, Any]:
    from runner.core.usage import Usage
    from runner.store.cap_ledger import read_scope
    from runner.store.cap_view import has_ledger

    spent = reserved = Usage()
    if db is not None and has_ledger(db):
        try:
            found = read_scope(db, window.key)
            spent, reserved = found.spent, found.reserved
        except KeyError:
            pass
    left: dict[str, float] = {}
    if spec.max_cost_usd is not None:
        left["max_cost_usd"] = round(max(spec.max_cost_usd - spent.cost_usd - reserved.cost_usd, 0.0), 8)
    if spec.max_tokens is not None:
        used = spent.input_tokens + spent.output_tokens + reserved.input_tokens + reserved.output_tokens
        left["max_tokens"] = max(spec.max_tokens - used, 0)
    return {
        "key": window.key, "start": window.start.isoformat(), "end": window.end.isoformat(),
        "spent": {"cost_usd": round(spent.cost_usd, 8), "tokens": spent.input_tokens + spent.output_tokens,
                  "model_calls": spent.model_calls},
        "reserved": {"cost_usd": round(reserved.cost_usd, 8), "tokens": reserved.input_tokens + reserved.output_tokens,
                     "model_calls": reserved.model_calls},
        "left": left,
    }  # fmt: skip


def _fmt(cap: str, value: float) -> str:
    return f"${value:.6f}" if cap == "max_cost_usd" else f"{int(value)} tokens"
