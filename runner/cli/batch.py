"""``runner batch TASK --input FILE --output FILE``: a task over every row of a file."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import click

from runner.cli.json_output import echo_json
from runner.cli.options import EndpointURL, LocationType, batch_flags
from runner.cli.terminal import echo_line as echo
from runner.config.project import find_root, load_project_or_raise
from runner.core.usage import cache_hit_rate
from runner.errors import EXIT_INTERRUPTED
from runner.locations import Location

T = TypeVar("T")


@click.command()
@click.argument("task")
@click.option("--input", "input_path", required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path), help="CSV, JSONL or Parquet file: one task run per row.")
@click.option("--output", "output_path", required=True, type=LocationType(), help="One record per input row: .jsonl, .csv or .parquet (a path, or a URL such as s3://bucket/out.jsonl).")
@batch_flags
@click.option("--journal", "journal_path", type=click.Path(dir_okay=False, path_type=Path), help="Resume journal, an SQLite file (default: .runner/batches/<task>-<input>.sqlite3 ($RUNNER_STATE_DIR/batches/... when set), or in $RUNNER_STORE_URL when set).")
@click.option("--restart", is_flag=True, help="Discard the journal and start over (default: resume); provider batches it had out are cancelled. Also the way on when the configuration changed: every row runs again under the new one.")
@click.option("--estimate", is_flag=True, help="Price the whole file before running it: from a paid sample of rows (--sample, default 20; they count toward the full run), or with --no-calls from prompt token counts. Exit 3 when --max-cost-usd cannot hold even the low end.")
@click.option("--no-calls", is_flag=True, help="With --estimate: make no model call; price from exact prompt counts and the worst-case output.")
@click.option("--report-dir", type=LocationType(), help="Where the batch report goes (a directory or a URL).")
@click.option("--progress", type=click.Choice(["auto", "bar", "log", "none"]), default="auto", show_default=True)
@click.option("--base-url", type=EndpointURL(), help="Send model calls to this OpenAI-compatible endpoint.")
@click.option("--root", type=click.Path(exists=True, file_okay=False, path_type=Path), help="Project root.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def batch(task: str, input_path: Path, output_path: Location, journal_path: Path | None, restart: bool, estimate: bool,
          no_calls: bool, report_dir: Location | None, progress: str, base_url: str | None, root: Path | None, as_json: bool,
          **values: Any) -> None:
    """Run TASK once per row of --input; write one record per row to --output.

    Rerunning the same command resumes: rows already done are skipped, failed ones are
    retried up to --max-attempts, nothing is duplicated or lost (also after kill -9).
    Exit codes: 0 every row done (of a trial: its rows), 1 some row failed or was invalid, 2 usage
    error (also: the configuration changed since the journal began; --restart or --keep-answers),
    3 a batch cap stopped the batch (--estimate: the file does not fit --max-cost-usd), 130
    interrupted (rerun to resume).
    """
    from runner.batch.file_batch import run_batch_file
    from runner.batch.local_dirs import check_batch_dirs
    from runner.batch.options import BatchOptions
    from runner.batch.request import BatchRequest

    options = BatchOptions.typed(values, "runner batch")  # typed by the flags already: nothing new to refuse
    root = (root or find_root(Path(task) if task.endswith((".yaml", ".yml")) else Path.cwd())).resolve()
    project = load_project_or_raise(root)
    spec = project.task_for(task)
    request = BatchRequest(
        input_path=input_path, output_path=output_path, journal_path=journal_path, report_dir=report_dir, restart=restart,
        base_url_override=base_url, progress=progress, batch_limits=options.batch_limits(spec.batch_api),
        **options.request_fields(),
    )
    if options["seed"] is not None and options["sample"] is None and not estimate:
        raise click.UsageError("--seed only applies with --sample (or --estimate, whose sample it picks)")
    if no_calls and not estimate:
        raise click.UsageError("--no-calls only applies with --estimate")
    if request.mode(spec) == "batch-api":
        _refuse_rate_limits(request)
    else:
        options.check_live()
    check_batch_dirs(project, request, spec.name)  # a read-only project fails here, before any row is paid for
    if estimate:
        _estimate(project, spec, request, no_calls, as_json)
        return
    try:
        summary = asyncio.run(_stopped_by_sigterm(run_batch_file(project, spec, request)))
    except (KeyboardInterrupt, asyncio.CancelledError):  # Ctrl-C, or SIGTERM (see _stopped_by_sigterm)
        click.echo("interrupted: rerun the same command to resume", err=True)
        raise click.exceptions.Exit(EXIT_INTERRUPTED) from None
    _show(summary, as_json)
    raise click.exceptions.Exit(summary["exit_code"])


async def _stopped_by_sigterm(batch: Coroutine[Any, Any, T]) -> T:
    """Await ``batch``; SIGTERM (a scheduler stopping the command) interrupts it as Ctrl-C does:
    the rows in flight are recorded interrupted, provider batches out are kept for a rerun."""
    loop, task = asyncio.get_running_loop(), asyncio.current_task()
    assert task is not None
    loop.add_signal_handler(signal.SIGTERM, task.cancel)
    try:
        return await batch
    finally:
        loop.remove_signal_handler(signal.SIGTERM)


def _refuse_rate_limits(request: Any) -> None:
    """``--rpm``/``--tpm`` with a provider batch: a usage error naming the flag, never ignored."""
    from runner.batch.batch_api import refused_flags

    refused = refused_flags(request)
    if refused:
        raise click.UsageError(
            f"{', '.join(refused)} does not apply with --via batch-api (or mode: batch_api on the task): a provider "
            "batch has no per-minute rate to keep (each round goes out as one upload, and calls --batch-fallback live "
            "sends are not rate limited). Drop it, or run live with --via live; --concurrency N limits the rows per round"
        )


def _estimate(project: Any, spec: Any, request: Any, no_calls: bool, as_json: bool) -> None:
    """``--estimate``: print the forecast (:mod:`runner.batch.estimate`) and exit 0, or 3 when it does not fit the cap."""
    from runner.batch.estimate import estimate_batch, render_estimate

    try:
        forecast = asyncio.run(_stopped_by_sigterm(estimate_batch(project, spec, request, no_calls=no_calls)))
    except (KeyboardInterrupt, asyncio.CancelledError):
        click.echo("interrupted: rerun the same command to resume", err=True)
        raise click.exceptions.Exit(EXIT_INTERRUPTED) from None
    if as_json:
        echo_json(forecast.as_dict())
    else:
        for line in render_estimate(forecast):
            echo(line)
    raise click.exceptions.Exit(forecast.exit_code)


def _show(summary: dict[str, Any], as_json: bool) -> None:
    if as_json:
        echo_json(summary)
        return
    counts = ", ".join(f"{n} {status}" for status, n in summary["counts"].items() if n)
    hit = cache_hit_rate(summary["input_tokens"], summary.get("cached_input_tokens") or 0)
    cached = f" ({100 * hit:.1f}% of input from the prompt cache)" if hit else ""
    reasoning = f" ({summary['reasoning_tokens']} of the output spent reasoning)" if summary.get("reasoning_tokens") else ""
    echo(
        f"batch {summary['batch_id']}: {summary['total']} rows ({counts}); ${summary['cost_usd']:.6f}, "
        f"{summary['input_tokens'] + summary['output_tokens']} tokens{cached}{reasoning}, {summary['elapsed_seconds']}s"
    )
    if summary["stop_reason"]:
        echo(f"stopped: {summary['stop_reason']}")
    if summary.get("trial_rows") is not None:
        echo(f"trial: {summary['trial_rows']} row(s); {summary['rows_left_for_later']} left for the full run (the same command without --limit/--sample)")
    not_retried = summary.get("not_retried") or {}
    if not_retried:
        from runner.batch.engine import ATTEMPTS_USED_UP

        why = ", ".join(f"{n} {'with their attempts used up' if reason == ATTEMPTS_USED_UP else f'failed as {reason} (a retry would not fix it)'}"
                        for reason, n in not_retried.items())  # fmt: skip
        echo(f"not retried: {sum(not_retried.values())} failed row(s): {why}; --retry-failed runs them once more")
    for note in summary.get("notes") or ():
        echo(f"note: {note}")
    if summary.get("fingerprint"):
        echo(f"configuration: fingerprint {summary['fingerprint']}")
    echo(f"output: {summary['output_path']}")
    echo(f"report: {summary['report_path']}")
