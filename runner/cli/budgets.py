"""``runner budgets``: what each budget over time (``budgets.d/``) has spent and reserved in
its current and last windows, what is left, and who spent it (by task, agent and model).

The figures are the budgets' scopes in the shared cap ledger (:mod:`runner.runs.budget_scopes`):
the shared PostgreSQL store (``--store-url``, ``$RUNNER_STORE_URL``), else
``<state dir>/budgets.sqlite3``. Who spent is summed from the ledger's entries, each of which
records its call's task, agent and model (:mod:`runner.store.cap_spenders`), so it adds up
to the window's figures. It only reads: an SQLite ledger is opened read-only, and a window
nobody has spent in yet shows zero.
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
    from runner.core.usage import Usage
    from runner.store.database import Database

TOP_SPENDERS = 5
"""How many spenders the text output lists per window (the largest spend first; ``--json`` lists all)."""
_SPENDER_HEADERS = ("task", "agent", "model", "spent", "tokens", "calls", "reserved")


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
    "--json", "as_json", is_flag=True,
    help="JSON output: {ledger, budgets: [{name, window, current, last}]}; each window has spent (with its reasoning_tokens "
    "and cache_write_tokens), reserved, left and spenders: [{task, agent, model, spent, reserved}], every spender, the largest "
    "spend first.",
)  # fmt: skip
def budgets(root: Path, store_url: str | None, as_json: bool) -> None:
    """Per budget: its limits, and spent, reserved (calls in flight) and left in the current
    and the last window, and who spent it: a table of the top 5 spenders by task, agent and
    model, the largest spend first (a judge's calls count under the judge agent, a knowledge
    base's embeddings requests under its name).

    Spent is what settled calls used, plus the worst case of calls a worker that died left
    in flight once its run's next attempt took them over; the spenders add up to the
    window. '-' is not recorded (a call reserved by an older runner, or outside a run).
    Reads only. Exit 2 when the project does not load, or the ledger is damaged or another
    application's file (named; it is left as it was)."""
    from runner.config.project import load_project_or_raise
    from runner.runs.budget_scopes import ledger_target
    from runner.store.connect import open_database
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
                 f"({w['spent']['tokens']} tokens{_token_parts(w['spent'])}, {w['spent']['model_calls']} calls), "
                 f"reserved ${w['reserved']['cost_usd']:.6f}; left: {left}")  # fmt: skip
            for line in _spender_table(w["spenders"]):
                echo(f"{'':11}{line}")


def _spender_table(spenders: list[dict[str, Any]]) -> list[str]:
    """The top :data:`TOP_SPENDERS` as aligned lines (names left, figures right), and how many more there are."""
    rows = [
        (s["task"] or "-", s["agent"] or "-", s["model"] or "-", f"${s['spent']['cost_usd']:.6f}",
         str(s["spent"]["tokens"]), str(s["spent"]["model_calls"]), f"${s['reserved']['cost_usd']:.6f}")
        for s in spenders[:TOP_SPENDERS]
    ]  # fmt: skip
    if not rows:
        return []
    widths = [max(len(cells[i]) for cells in (_SPENDER_HEADERS, *rows)) for i in range(len(_SPENDER_HEADERS))]
    lines = [
        "  ".join(cell.ljust(width) if i < 3 else cell.rjust(width) for i, (cell, width) in enumerate(zip(cells, widths, strict=True)))
        for cells in (_SPENDER_HEADERS, *rows)
    ]  # fmt: skip
    if len(spenders) > TOP_SPENDERS:
        lines.append(f"... {len(spenders) - TOP_SPENDERS} more spender(s) (--json lists them all)")
    return lines


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
    from runner.store.cap_spenders import SpenderFigures, spenders
    from runner.store.cap_view import has_ledger

    spent = reserved = Usage()
    who: list[SpenderFigures] = []
    if db is not None and has_ledger(db):
        try:
            found = read_scope(db, window.key)
            spent, reserved, who = found.spent, found.reserved, spenders(db, window.key)
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
        "spent": _amounts(spent, parts=True), "reserved": _amounts(reserved), "left": left,
        "spenders": [{**s.spender.as_dict(), "spent": _amounts(s.spent), "reserved": _amounts(s.reserved)} for s in who],
    }  # fmt: skip


def _amounts(usage: Usage, *, parts: bool = False) -> dict[str, Any]:
    """A window's or a spender's spent or reserved figures, as the JSON shows them; with ``parts``
    (a window's spend: the ledger keeps them per scope, not per entry) the reasoning tokens (of
    the output tokens) and the cache-write tokens (of the input tokens, billed at the cache-write rate)."""
    amounts = {"cost_usd": round(usage.cost_usd, 8), "tokens": usage.total_tokens, "model_calls": usage.model_calls}
    if parts:
        amounts |= {"reasoning_tokens": usage.reasoning_tokens, "cache_write_tokens": usage.cache_write_tokens}
    return amounts


def _token_parts(spent: dict[str, Any]) -> str:
    """``: 300 reasoning, 1200 cache writes`` for the parts of a window's tokens that are not zero."""
    parts = [f"{spent[key]} {label}" for key, label in (("reasoning_tokens", "reasoning"), ("cache_write_tokens", "cache writes")) if spent.get(key)]
    return ": " + ", ".join(parts) if parts else ""


def _fmt(cap: str, value: float) -> str:
    return f"${value:.6f}" if cap == "max_cost_usd" else f"{int(value)} tokens"
