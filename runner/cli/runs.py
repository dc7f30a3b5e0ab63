"""``runner runs`` and ``runner runs show ID``: what the run store recorded."""

from __future__ import annotations

import json
from pathlib import Path

import click

from runner.cli.json_output import echo_json
from runner.cli.terminal import echo_line as echo
from runner.cli.terminal import safe_text
from runner.errors import UsageError
from runner.local_state import not_a_directory
from runner.store.runstore import RunStore


def open_store(store_path: Path | None, root: Path, *, read_only: bool = True) -> RunStore:
    """``--store PATH``, else ``$RUNNER_STORE_URL`` (PostgreSQL), else ``<root>/.runner/runs.sqlite3``;
    read-only unless the command writes (``runs prune`` without ``--dry-run``)."""
    from runner.runs.execute import default_store_path, open_run_store
    from runner.store.database import resolve_store

    target = resolve_store(path=store_path, default=default_store_path(root.resolve()))
    if isinstance(target, Path) and (blocker := not_a_directory(target.parent)) is not None:
        raise UsageError(f"{blocker} is a file, not a directory, so there is no run store at {target}; "
                         "point RUNNER_STATE_DIR (or --store) at a directory, or move that file away")  # fmt: skip
    if isinstance(target, Path) and not target.exists():
        raise UsageError(f"no run store at {target}; run a task first, or pass --store PATH (or set RUNNER_STORE_URL)")
    return open_run_store(root.resolve(), path=store_path, read_only=read_only)


def resolve_run_id(store: RunStore, run_id: str) -> str:
    if store.run(run_id):
        return run_id
    matches = store.find_runs(run_id)
    if len(matches) == 1:
        return matches[0]
    hint = f"; did you mean one of {', '.join(matches)}?" if matches else "; `runner runs` lists them"
    raise UsageError(f"no run '{run_id}' in {store.where}{hint}")


@click.group(invoke_without_command=True)
@click.option("--store", "store_path", type=click.Path(dir_okay=False, path_type=Path), help="Run store, an SQLite file (default: $RUNNER_STORE_URL when set, else .runner/runs.sqlite3).")
@click.option("--root", type=click.Path(exists=True, file_okay=False, path_type=Path), default=".", help="Project root.")
@click.option("--task", help="Only runs of this task.")
@click.option("--limit", type=click.IntRange(1, 10000), default=20, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="JSON output.")
@click.pass_context
def runs(ctx: click.Context, store_path: Path | None, root: Path, task: str | None, limit: int, as_json: bool) -> None:
    """List recorded runs, newest first."""
    ctx.obj = {"store_path": store_path, "root": root}
    if ctx.invoked_subcommand:
        return
    store = open_store(store_path, root)
    rows = store.list_runs(task, limit)
    if as_json:
        keys = ("run_id", "task", "status", "started_at", "finished_at", "cost_usd", "input_tokens", "output_tokens", "model_calls", "tool_calls", "error")
        echo_json([{k: r[k] for k in keys} for r in rows])
        return
    echo(f"{'RUN ID':<46} {'STATUS':<10} {'USD':>10} {'TOKENS':>8} {'CALLS':>5}  STARTED")
    for r in rows:
        echo(
            f"{r['run_id']:<46} {r['status']:<10} {r['cost_usd']:>10.6f} {r['input_tokens'] + r['output_tokens']:>8} "
            f"{r['model_calls']:>5}  {r['started_at']}"
        )


@runs.command()
@click.argument("run_id")
@click.option("--json", "as_json", is_flag=True, help="Print the full run record (or, with --transcript, the transcript) as JSON.")
@click.option("--transcript", is_flag=True, help="Show every model call's messages, tools and response, and every tool call's output.")
@click.pass_context
def show(ctx: click.Context, run_id: str, as_json: bool, transcript: bool) -> None:
    """Show one run: status, cost, steps, model and tool calls (or its whole transcript)."""
    store = open_store(ctx.obj["store_path"], ctx.obj["root"])
    run_id = resolve_run_id(store, run_id)
    run = store.run(run_id)
    assert run is not None
    if transcript:
        show_transcript(store, run_id, as_json=as_json)
        return
    if as_json:
        echo_json(json.loads(run["record_json"]) if run["record_json"] else dict(run))
        return
    echo(f"run {run_id}  task {run['task']}  status {run['status']}  attempts {run['attempts']}")
    echo(f"  started {run['started_at']}  finished {run['finished_at']}")
    echo(f"  cost ${run['cost_usd']:.6f}  tokens {run['input_tokens']}+{run['output_tokens']} ({run['cached_input_tokens']} cached)  model calls {run['model_calls']}  tool calls {run['tool_calls']}")
    if run["error"]:
        echo(f"  reason: {run['error']}")
    if run["report_dir"]:
        echo(f"  report: {run['report_dir']}")
    echo("steps:")
    for step in store.steps(run_id):
        who = step["agent"] or step["tool"] or ""
        echo(f"  {step['step_id']:<20} {step['kind']:<9} {who:<16} {step['status']:<9} ${step['cost_usd']:.6f} {step['duration_seconds'] or 0:.2f}s")
    echo("model calls:")
    for call in store.model_calls(run_id):
        echo(f"  #{call['seq']:<3} {call['step_id']:<16} {call['model']:<20} {call['status']:<6} {call['input_tokens']}+{call['output_tokens']} tok ({call['cached_input_tokens']} cached) ${call['cost_usd']:.6f} {call['latency_seconds']:.2f}s")
    echo("tool calls:")
    for call in store.tool_calls(run_id):
        echo(f"  {call['step_id']:<16} {call['name']:<16} {call['status']:<6} {call['output_excerpt'][:60]!r}")


def show_transcript(store: RunStore, run_id: str, *, as_json: bool) -> None:
    """Print a run's transcript: readable (control characters escaped), or as JSON."""
    from runner.reports.transcript import as_text

    entries = store.transcripts.read(run_id)
    if as_json:
        echo_json({"run_id": run_id, "entries": entries})
        return
    if not entries:
        echo(f"run {run_id} has no transcript (it was recorded before transcripts were kept, or made no calls)")
        return
    click.echo(safe_text(as_text(entries)), nl=False)


@runs.command()
@click.option("--older-than", "older_than", required=True, metavar="AGE", help="Delete runs that ended more than AGE ago: 30d, 12h, 2w, 90m, 45s.")
@click.option("--dry-run", is_flag=True, help="Say what would be deleted, and delete nothing.")
@click.option("--json", "as_json", is_flag=True, help="JSON output.")
@click.pass_context
def prune(ctx: click.Context, older_than: str, dry_run: bool, as_json: bool) -> None:
    """Delete old runs with their steps, calls and transcripts, and transcript blobs no run uses.

    Runs still marked running are kept; report directories on disk are not touched.
    """
    from runner.core.ages import parse_age
    from runner.store.retention import prune as prune_store

    try:
        age = parse_age(older_than)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="'--older-than'") from None
    store = open_store(ctx.obj["store_path"], ctx.obj["root"], read_only=dry_run)
    pruned = prune_store(store.database, age, dry_run=dry_run)
    if as_json:
        echo_json(pruned.as_dict())
        return
    verb = "would delete" if dry_run else "deleted"
    echo(f"{verb} {pruned.runs} run(s) that ended before {pruned.cutoff} from {store.where}")
    echo("  " + ", ".join(f"{n} {table.replace('_', ' ')}" for table, n in pruned.rows.items()))
    echo(f"  {pruned.blobs} transcript blob(s) no remaining run uses ({pruned.blob_chars} characters)")
    echo(f"  kept {pruned.kept_runs} run(s)" + (f", {pruned.kept_running} older one(s) still marked running" if pruned.kept_running else ""))
