"""One call that runs a whole batch: input file -> journal -> rows -> output file + report.

Used by ``runner batch`` and by the Airflow fan-out (one call per shard).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from runner.batch.dedupe import DedupingExecutor
from runner.batch.engine import BatchSummary, FailurePolicy, batch_budget, run_batch
from runner.batch.executor import TaskExecutor
from runner.batch.fingerprint import check_fingerprint
from runner.batch.inputs import InputSource, Row, file_sha256, parse_mapping, read_rows
from runner.batch.journal import BatchJournal, default_journal_path
from runner.batch.journal_open import open_batch_journal
from runner.batch.output import KeptColumns, check_output_target, exclusive_output, write_output
from runner.batch.output_lock import OutputHold, while_held
from runner.batch.ratelimit import SharedRateLimiter
from runner.batch.request import (
    DEFAULT_CONCURRENCY,
    SHARED_SCOPE,
    BatchRequest,
    journal_database,
    progress_for,
)
from runner.batch.summary import batch_report, keep_or_write_report
from runner.batch.trial import SelectedRows, trial_rows
from runner.caps.budget import Budget
from runner.caps.shared import SharedBudget, shared_caps
from runner.config.project import Project
from runner.config.specs import TaskSpec
from runner.errors import UsageError
from runner.locations import Location
from runner.model.factory import check_endpoints
from runner.runs.budget_scopes import check_budget_ledger
from runner.runs.options import RunOptions
from runner.store.cap_ledger import CapLedger, open_cap_ledger
from runner.store.database import Database, resolve_store
from runner.store.runstore import now_iso
from runner.tracing import current_span


def open_journal(project: Project, task: TaskSpec, request: BatchRequest) -> tuple[BatchJournal, InputSource]:
    """The journal ``request`` runs with (created when new, locked) and its input source.

    A request for a row range (``rows``) gets its own journal identity, so one shard's
    journal is never resumed for another. Ids and duplicate checks still cover the whole
    file, so a shard's rows keep the numbers and ids a whole-file batch gives them.
    """
    source = _source(task, request)
    return _open_journal(task, request, source, _journal_path(project, task, request, source)), source


def _source(task: TaskSpec, request: BatchRequest) -> InputSource:
    return InputSource.open(
        request.input_path, format=request.format, mapping=parse_mapping(request.mapping, task.inputs),
        id_column=request.id_column,
    )


def _journal_path(project: Project, task: TaskSpec, request: BatchRequest, source: InputSource) -> Path:
    return request.journal_path or default_journal_path(project.root, task.name, source.path)


def _open_journal(task: TaskSpec, request: BatchRequest, source: InputSource, journal_path: Path) -> BatchJournal:
    options = {**source.options(), **({"rows": list(request.rows)} if request.rows else {})}
    return open_batch_journal(
        journal_path, task=task.name, input_path=source.path, input_sha256=file_sha256(source.path),
        options=options, restart=request.restart, durable=request.durable, database_url=journal_database(request),
    )


def _rows_between(rows: Iterator[Row], span: tuple[int, int] | None) -> Iterator[Row]:
    """The rows numbered ``span[0]..span[1]`` (all without a span); stops reading after the last."""
    first, last = span or (1, sys.maxsize)
    for row in rows:
        if row.number > last:
            return
        if row.number >= first:
            yield row


async def run_batch_file(project: Project, task: TaskSpec, request: BatchRequest) -> dict[str, Any]:
    """Run ``task`` over every row of the input file; returns a small summary dict."""
    from runner.batch.output import output_format

    output_format(request.output_path, request.output_format)  # a bad output name fails before any row runs
    request.check()
    check_endpoints(
        project, task, model_override=request.model_override, base_url_override=request.base_url_override, api_key=request.api_key,
    )
    check_budget_ledger(project, task, request.store_url)  # a ledger that cannot be used stops the batch, not each row
    if request.mode(task) == "batch-api":
        from runner.batch.batch_api import check_batch_api, refused_flags

        if refused_flags(request):
            raise UsageError(f"{', '.join(refused_flags(request))}: a provider batch has no per-minute rate to keep; run live to rate limit calls")
        check_batch_api(project, task, request.model_override, request.base_url_override, request.api_key)
    source = _source(task, request)
    journal_path = _journal_path(project, task, request, source)
    output = request.output_path
    if isinstance(output, Path):  # a URL is written in one request: no local file to check
        check_output_target(output, input_path=source.path, journal_path=journal_path)
    holder = {"task": task.name, "input": str(source.path.resolve()), "journal": str(journal_path.resolve())}
    store = resolve_store(url=request.store_url, path=request.store_path, default=Path())  # a URL's lock lives there
    with exclusive_output(output, holder, store_url=store if isinstance(store, str) else None) as hold:
        summary, records, markdown = await _run_locked(project, task, request, source, journal_path, hold)
    return {
        "batch_id": summary.batch_id,
        "task": task.name,
        "counts": summary.counts,
        "total": summary.total,
        "records_written": records,
        "cost_usd": round(summary.usage.cost_usd, 8),
        "input_tokens": summary.usage.input_tokens,
        "output_tokens": summary.usage.output_tokens,
        "cached_input_tokens": summary.usage.cached_input_tokens,
        "cache_write_tokens": summary.usage.cache_write_tokens,
        "reasoning_tokens": summary.usage.reasoning_tokens,
        "elapsed_seconds": summary.elapsed_seconds,
        "stop_reason": summary.stop_reason,
        "stop_kind": summary.stop_kind,
        "exit_code": summary.exit_code,
        "output_path": str(request.output_path),
        "report_path": None if markdown is None else str(markdown),
        "journal_path": str(journal_path),
        "provider_pending": list(summary.pending),
        "fingerprint": summary.fingerprint,
        "not_retried": dict(summary.not_retried),
        "trial_rows": None if summary.selection is None else len(summary.selection),
        "rows_left_for_later": summary.outside_selection,
        "notes": list(summary.notes),
    }


async def _run_locked(
    project: Project, task: TaskSpec, request: BatchRequest, source: InputSource, journal_path: Path, hold: OutputHold
) -> tuple[BatchSummary, int, Location | None]:
    """The batch proper, while this process holds the output file: rows, output, report. The rows
    stop, and the output is not written, once the output's lock is lost (:class:`OutputLockLost`)."""
    journal = _open_journal(task, request, source, journal_path)
    try:
        notes = check_fingerprint(project, task, request, journal)
        kept = KeptColumns.parse(request.keep_columns, source.path, source.format) if request.keep_columns else None
    except BaseException:
        journal.close()
        raise
    if journal.discarded:  # (a --restart, maybe killed): the last run's provider batches would run on, billed twice
        from runner.batch.provider_cancel import cancel_discarded

        await cancel_discarded(project, task, request, journal, sys.stderr)
    ledger = open_shared_ledger(request)
    span = {"runner.batch.id": journal.batch_id, "runner.task": task.name, "runner.batch.input": source.path.name}
    try:
        with current_span(project.telemetry, f"batch {task.name}", span) as note:  # the rows' runs are its children
            summary = await while_held(hold, _run_rows(project, task, request, source, journal, ledger))
            note(**{f"runner.batch.rows.{status}": n for status, n in summary.counts.items()})
        if summary.pending and not request.provider_wait:  # out at the provider: no output or report until collected
            return summary, 0, None
        hold.check()  # still this batch's output, right before it is written
        selected = _selected_rows(journal, summary.selection)
        records = write_output(selected, request.output_path, format=request.output_format, kept=kept)
        report_dir = request.report_dir or _default_report_dir(project, task, summary.batch_id)
        report = batch_report(journal, summary)
        if ledger is not None and request.shared_scope is not None:
            report["ledger"] = ledger.scope(request.shared_scope.key).as_dict()
        summary = replace(summary, notes=(*notes, *summary.notes), fingerprint=(journal.fingerprint or "")[:12] or None)
        markdown = keep_or_write_report(report, report_dir, summary)
    finally:
        journal.close()
        if ledger is not None:
            ledger.db.close()
    return summary, records, markdown


async def _run_rows(
    project: Project, task: TaskSpec, request: BatchRequest, source: InputSource, journal: BatchJournal, ledger: CapLedger | None
) -> BatchSummary:
    """Every pending row through the engine: calling the model live, or in provider batch rounds."""
    batch_api = request.mode(task) == "batch-api"
    gate = None if batch_api else SharedRateLimiter(requests_per_minute=request.requests_per_minute, tokens_per_minute=request.tokens_per_minute)
    base = RunOptions(
        write_report=False, caps=request.run_caps, model_override=request.model_override,
        base_url_override=request.base_url_override, api_key=request.api_key, store_path=request.store_path,
        store_url=request.store_url, use_cache=request.use_cache, replay_answers=batch_api,
        store_live_answers=not batch_api,
    )
    rows = _rows_between(read_rows(source, task.inputs), request.rows)
    async with TaskExecutor(project, task, rate_gate=gate, store_path=request.store_path, store_url=request.store_url) as executor:
        if batch_api:
            from runner.batch.batch_api import run_batch_api

            return await run_batch_api(project, task, request, journal, rows, executor, _budget(request, ledger), base)
        keep_for_replay(executor.store.database)
        if not journal.ingested:
            journal.ingest(rows)
        select = trial_rows(journal, request)
        summary = await run_batch(
            rows, DedupingExecutor(executor) if request.dedupe else executor, journal=journal,
            budget=_budget(request, ledger), concurrency=request.concurrency or DEFAULT_CONCURRENCY, max_attempts=request.max_attempts,
            failure_policy=FailurePolicy(stop_after=request.stop_after_failures), rate_gate=gate,
            progress=progress_for(request), base_options=base, ledger=executor, select=select, retry_failed=request.retry_failed,
        )
        return replace(summary, selection=None if select is None else tuple(select), notes=_idle_flags(request, summary))


def keep_for_replay(db: Database) -> None:
    """Create the tables a live row's answers and tool results are kept in, so that a row stopped
    part way (a budget or batch cap, a provider quota, an interrupt) resumes without paying again
    for what it was answered (:mod:`runner.agent.replay`)."""
    from runner.store.provider_answers import ProviderAnswers
    from runner.store.provider_tools import ProviderToolResults

    ProviderAnswers(db)
    ProviderToolResults(db)


def _selected_rows(journal: BatchJournal, selection: tuple[int, ...] | None) -> BatchJournal | SelectedRows:
    """What the output file holds: every row, or a trial's rows only."""
    return journal if selection is None else SelectedRows(journal, frozenset(selection))


def _idle_flags(request: BatchRequest, summary: BatchSummary) -> tuple[str, ...]:
    """Flags that shape how rows run, given to a run that ran none: said, not silently dropped."""
    if summary.attempts_here:
        return ()
    given = [flag for flag, on in (("--dedupe", request.dedupe), ("--no-cache", not request.use_cache),
                                   ("--retry-failed", request.retry_failed)) if on]  # fmt: skip
    if not given:
        return ()
    return (f"{', '.join(given)}: no row was left to run, so nothing was deduplicated, fetched afresh or retried; "
            "--restart runs every row again",)  # fmt: skip


def open_shared_ledger(request: BatchRequest) -> CapLedger | None:
    """The ledger of ``request.shared_scope`` with the scope opened (``None`` without one): in the
    request's PostgreSQL store (``store_url``), else in the scope's SQLite file."""
    shared = request.shared_scope
    if shared is None:
        return None
    target = request.store_url or shared.sqlite_path
    if target is None:
        raise UsageError(f"the shared cap scope {shared.key!r} needs a PostgreSQL store or an SQLite file to live in")
    ledger = open_cap_ledger(target)
    try:
        ledger.open(shared.key, shared.caps, now_iso())
    except BaseException:
        ledger.db.close()
        raise
    return ledger


def _budget(request: BatchRequest, ledger: CapLedger | None) -> Budget:
    """The batch's budget: its own caps, inside the shared scope when there is one."""
    budget = batch_budget(request.batch_caps)
    if ledger is not None and request.shared_scope is not None:
        shared = request.shared_scope
        budget.parent = SharedBudget(shared_caps(shared.caps), scope=SHARED_SCOPE, ledger=ledger, key=shared.key)
    return budget


def _default_report_dir(project: Project, task: TaskSpec, batch_id: str) -> Path:
    """``reports/<task>/batch-<id>``, with no link in it leading out of the project (a resumed
    batch's directory exists, and its name is known in advance)."""
    from runner.batch.local_dirs import REPORT_FIX
    from runner.local_state import confined_tree

    folder = project.root / "reports" / task.name / f"batch-{batch_id}"
    return confined_tree(folder, project.root, "batch reports", REPORT_FIX)
