"""``runner batch TASK --input FILE --output FILE``: a task over every row of a file."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import click

from runner.cli.json_output import echo_json
from runner.cli.options import CapValue, EndpointURL, FiniteFloatRange, LocationType, ModelId, caps_from_flags
from runner.cli.terminal import echo_line as echo
from runner.config.project import find_root, load_project_or_raise
from runner.core.usage import cache_hit_rate
from runner.errors import EXIT_INTERRUPTED
from runner.locations import Location

T = TypeVar("T")
FORMATS = click.Choice(["csv", "jsonl", "parquet"])


@click.command()
@click.argument("task")
@click.option("--input", "input_path", required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path), help="CSV, JSONL or Parquet file: one task run per row.")
@click.option("--output", "output_path", required=True, type=LocationType(), help="One record per input row: .jsonl, .csv or .parquet (a path, or a URL such as s3://bucket/out.jsonl).")
@click.option("--input-format", type=FORMATS, help="Input format (default: from the suffix).")
@click.option("--output-format", type=FORMATS, help="Output format (default: from the suffix).")
@click.option("--map", "mapping", multiple=True, metavar="INPUT=COLUMN", help="Take a task input from a differently named column (repeatable).")
@click.option("--id-column", help="Column holding each row's id (default: a hash of the row's inputs).")
@click.option("--concurrency", type=click.IntRange(1, 1024), help="Rows in flight at once (default: 8; with --via batch-api: every row, and N keeps each provider batch round to at most N rows' calls).")
@click.option("--rpm", type=FiniteFloatRange(min=0, min_open=True), help="Model requests per minute, shared by all rows (live only: refused with --via batch-api).")
@click.option("--tpm", type=FiniteFloatRange(min=0, min_open=True), help="Model tokens per minute, shared by all rows (live only: refused with --via batch-api).")
@click.option("--max-attempts", type=click.IntRange(1, 100), default=2, show_default=True, help="Attempts per row, counting resumed ones.")
@click.option("--stop-after-failures", type=click.IntRange(min=1), help="Stop starting rows after this many failed rows (default: carry on).")
@click.option("--max-cost-usd", type=CapValue("max_cost_usd"), help="Batch cap: total US dollars (0: free models only).")
@click.option("--max-tokens", type=CapValue("max_tokens"), help="Batch cap: total tokens (1 or more).")
@click.option("--max-wall-seconds", type=CapValue("max_wall_seconds"), help="Batch cap: wall-clock seconds for this invocation (more than 0).")
@click.option("--row-max-cost-usd", type=CapValue("max_cost_usd"), help="Per-row cap: US dollars (tightens the YAML).")
@click.option("--row-max-steps", type=CapValue("max_steps"), help="Per-row cap: model calls (tightens the YAML).")
@click.option("--journal", "journal_path", type=click.Path(dir_okay=False, path_type=Path), help="Resume journal, an SQLite file (default: .runner/batches/<task>-<input>.sqlite3 ($RUNNER_STATE_DIR/batches/... when set), or in $RUNNER_STORE_URL when set).")
@click.option("--restart", is_flag=True, help="Discard the journal and start over (default: resume); provider batches it had out are cancelled. Also the way on when the configuration changed: every row runs again under the new one.")
@click.option("--keep-answers", is_flag=True, help="The configuration changed since the journal began: keep the answers made so far (each record names the fingerprint it was made under) and run the rows still to do under the new one.")
@click.option("--limit", type=click.IntRange(min=1), help="Trial run: only the first N valid rows (they stay done: the full run does not pay for them again).")
@click.option("--sample", type=click.IntRange(min=1), help="Trial run: N valid rows at random (--seed); with --estimate, the sample it prices from (default 20).")
@click.option("--seed", type=int, help="Which rows --sample picks (default 0; the same seed, the same rows).")
@click.option("--retry-failed", is_flag=True, help="Run failed rows once more, also those whose attempts are used up or whose failure a retry would not fix.")
@click.option("--keep-columns", metavar="A,B|all", help="Copy these input columns (or all) into each output record (JSONL: 'input'; CSV/Parquet: input.<name> columns).")
@click.option("--estimate", is_flag=True, help="Price the whole file before running it: from a paid sample of rows (--sample, default 20; they count toward the full run), or with --no-calls from prompt token counts. Exit 3 when --max-cost-usd cannot hold even the low end.")
@click.option("--no-calls", is_flag=True, help="With --estimate: make no model call; price from exact prompt counts and the worst-case output.")
@click.option("--no-cache", is_flag=True, help="Bypass the result cache (cache: {ttl} in the YAML): every call goes to the endpoint or tool.")
@click.option("--dedupe", is_flag=True, help="Run rows with identical inputs once; each row still gets its own output record.")
@click.option("--durable", is_flag=True, help="fsync every recorded row (survives power loss, slower).")
@click.option("--report-dir", type=LocationType(), help="Where the batch report goes (a directory or a URL).")
@click.option("--progress", type=click.Choice(["auto", "bar", "log", "none"]), default="auto", show_default=True)
@click.option("--model", type=ModelId(), help="Use this model id for every agent.")
@click.option("--base-url", type=EndpointURL(), help="Send model calls to this OpenAI-compatible endpoint.")
@click.option("--via", type=click.Choice(["live", "batch-api"]), help="live: each model call is sent as it comes; batch-api: every row's k-th call goes out in one provider batch (OpenAI Batch API, about half price, each round answered within 24h). Default: the task's mode (live unless mode: batch_api).")
@click.option("--batch-fallback", type=click.Choice(["live"]), help="With --via batch-api: a call its provider batch did not answer (expired, cancelled, a server error) is sent live at once, at the live price.")
@click.option("--batch-poll-seconds", type=FiniteFloatRange(min=0, min_open=True), default=30.0, show_default=True, help="With --via batch-api: first wait between status checks (grows to 10 minutes).")
@click.option("--batch-max-requests", type=click.IntRange(min=1, max=100_000), help="With --via batch-api: requests per provider batch; a larger round is split (default: the task's batch_api.max_requests, else the model profile's: OpenAI 50,000, Anthropic 100,000; it may only lower it).")
@click.option("--batch-max-file-bytes", type=click.IntRange(min=1, max=256_000_000), help="With --via batch-api: bytes per provider batch; a larger round is split (default: the task's batch_api.max_file_bytes, else the model profile's: OpenAI 200 MB, Anthropic 256 MB; it may only lower it).")
@click.option("--root", type=click.Path(exists=True, file_okay=False, path_type=Path), help="Project root.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def batch(task: str, input_path: Path, output_path: Location, input_format: str | None, output_format: str | None,
          mapping: tuple[str, ...], id_column: str | None, concurrency: int | None, rpm: float | None, tpm: float | None,
          max_attempts: int, stop_after_failures: int | None, max_cost_usd: float | None, max_tokens: int | None,
          max_wall_seconds: float | None, row_max_cost_usd: float | None, row_max_steps: int | None,
          journal_path: Path | None, restart: bool, keep_answers: bool, limit: int | None, sample: int | None, seed: int | None,
          retry_failed: bool, keep_columns: str | None, estimate: bool, no_calls: bool, no_cache: bool, dedupe: bool, durable: bool, report_dir: Location | None, progress: str,
          model: str | None, base_url: str | None, via: str | None, batch_fallback: str | None, batch_poll_seconds: float,
          batch_max_requests: int | None, batch_max_file_bytes: int | None, root: Path | None, as_json: bool) -> None:
    """Run TASK once per row of --input; write one record per row to --output.

    Rerunning the same command resumes: rows already done are skipped, failed ones are
    retried up to --max-attempts, nothing is duplicated or lost (also after kill -9).
    Exit codes: 0 every row done (of a trial: its rows), 1 some row failed or was invalid, 2 usage
    error (also: the configuration changed since the journal began; --restart or --keep-answers),
    3 a batch cap stopped the batch (--estimate: the file does not fit --max-cost-usd), 130
    interrupted (rerun to resume).
    """
    from dataclasses import replace

    from runner.batch.file_batch import run_batch_file
    from runner.batch.local_dirs import check_batch_dirs
    from runner.batch.request import BatchRequest

    root = (root or find_root(Path(task) if task.endswith((".yaml", ".yml")) else Path.cwd())).resolve()
    project = load_project_or_raise(root)
    spec = project.task_for(task)
    limits = spec.batch_api
    if batch_max_requests is not None:
        limits = replace(limits, max_requests=batch_max_requests)
    if batch_max_file_bytes is not None:
        limits = replace(limits, max_file_bytes=batch_max_file_bytes)
    request = BatchRequest(
        input_path=input_path, output_path=output_path, format=input_format, output_format=output_format,
        mapping=mapping, id_column=id_column, journal_path=journal_path, report_dir=report_dir, restart=restart,
        durable=durable, concurrency=concurrency, max_attempts=max_attempts, stop_after_failures=stop_after_failures,
        batch_caps=caps_from_flags({"max_cost_usd": max_cost_usd, "max_tokens": max_tokens, "max_wall_seconds": max_wall_seconds}),
        run_caps=caps_from_flags({"max_cost_usd": row_max_cost_usd, "max_steps": row_max_steps}),
        requests_per_minute=rpm, tokens_per_minute=tpm, model_override=model, base_url_override=base_url,
        progress=progress, use_cache=not no_cache, dedupe=dedupe, via=via, batch_fallback=batch_fallback,
        batch_poll_seconds=batch_poll_seconds, batch_limits=limits, keep_answers=keep_answers, limit=limit, sample=sample,
        seed=seed or 0, retry_failed=retry_failed, keep_columns=keep_columns,
    )
    if seed is not None and sample is None and not estimate:
        raise click.UsageError("--seed only applies with --sample (or --estimate, whose sample it picks)")
    if no_calls and not estimate:
        raise click.UsageError("--no-calls only applies with --estimate")
    if request.mode(spec) == "batch-api":
        _refuse_rate_limits(request)
    else:
        given = [flag for flag, value in (("--batch-fallback", batch_fallback), ("--batch-max-requests", batch_max_requests),
                                          ("--batch-max-file-bytes", batch_max_file_bytes)) if value is not None]
        if given:
            raise click.UsageError(f"{', '.join(given)} only applies with --via batch-api (or mode: batch_api on the task)")
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
