"""The batch engine: run a task over many input rows in one asyncio process.

A fixed pool of ``concurrency`` worker tasks pulls rows from the journal (a page at a
time), so 100,000 rows never become 100,000 tasks and memory stays flat. Each row runs
through ``executor`` with its own :class:`RunOptions`: a run id derived from the batch id
and the row id (not the attempt, so a retry resumes the same run), the batch
:class:`Budget` as parent, and the shared rate gate.

Rules, in the order they apply:

- Before a row starts, ``budget.check_can_start()``; a batch cap reached stops new rows.
  A row whose run comes back ``capped`` by a batch-scope cap is recorded ``not_run`` (it
  will run on resume) and stops new rows too. Rows in flight end by themselves: their
  next model call meets the same cap.
- A failed attempt is retried in this call (after the fresh rows) and on resume,
  while ``attempts < max_attempts``; runs capped by their own caps, stuck runs, and input,
  auth and bad-request failures are final.
- One row never stops the batch: an exception from the executor is recorded as that row's
  failure (``error_kind='internal_error'``). ``failure_policy`` may stop after N failures.
- A row stopped part way by something outside its run (a batch cap or budget, a provider's
  quota, an interrupt, a crash) resumes: its next attempt replays the answers (and tool
  results) its run was given (:mod:`runner.agent.replay`), so no call is paid for twice.
- A row that waits on something outside the command (:class:`~runner.batch.executor.RowDeferred`:
  a provider batch still running) is recorded ``not_run`` and goes on when it runs again; that
  attempt is given back (waiting is not a failure, so only real failures use up attempts).
- Cancellation (Ctrl-C under ``asyncio.run``): in-flight rows are recorded as ``failed``
  with ``error_kind='interrupted'`` (retryable), unstarted rows as ``not_run``; the journal
  stays consistent and ``CancelledError`` propagates.
- When new rows stop, every row not started is recorded ``not_run`` with the reason.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import re
import time
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass, replace

from runner.batch.executor import RowDeferred, RowExecutor, SpendLedger
from runner.batch.inputs import Row
from runner.batch.journal import INTERRUPTED, BatchJournal, JournalRow, RowOutcome
from runner.batch.progress import BatchProgress, NoProgress
from runner.batch.summary import BatchSummary
from runner.caps.budget import Budget
from runner.config.specs import Caps
from runner.core.ports import RateGate
from runner.core.results import RunResult
from runner.errors import (
    CapReached,
    ConfigError,
    InputError,
    ModelError,
    SandboxUnavailable,
    UsageError,
    WorkspaceTampered,
)
from runner.model.faults import QUOTA_EXCEEDED
from runner.redact import redact
from runner.runs.options import RunOptions
from runner.store.group_commit import commit_group, durable

FINAL_ERROR_KINDS = frozenset({"input", "auth", "bad_request", "not_found", "config", "stuck", "workspace", "template"})
"""Failures a retry cannot fix (same inputs, same config)."""


@dataclass(frozen=True)
class FailurePolicy:
    """``continue`` past failures (``stop_after=None``), or stop new rows after N failed attempts."""

    stop_after: int | None = None

    def __post_init__(self) -> None:
        if self.stop_after is not None and self.stop_after < 1:
            raise ValueError("stop_after must be at least 1")


def batch_budget(caps: Caps) -> Budget:
    """The budget of a whole batch (scope ``batch``): total USD, tokens, wall time."""
    return Budget(caps=caps, scope="batch")


def batch_run_id(batch_id: str, row_id: str) -> str:
    """The run id of a row: the same for every attempt, safe in file names."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", row_id)[:40]
    if safe != row_id:  # keep distinct ids distinct after cleaning
        safe = f"{safe}-{hashlib.sha256(row_id.encode()).hexdigest()[:8]}"
    return f"{batch_id}-{safe}"


async def run_batch(
    rows: Iterable[Row],
    executor: RowExecutor,
    *,
    journal: BatchJournal,
    budget: Budget,
    concurrency: int = 8,
    max_attempts: int = 2,
    failure_policy: FailurePolicy | None = None,
    rate_gate: RateGate | None = None,
    progress: BatchProgress | None = None,
    base_options: RunOptions | None = None,
    ledger: SpendLedger | None = None,
    select: Collection[int] | None = None,
    retry_failed: bool = False,
) -> BatchSummary:
    """Run every pending row of ``journal`` (ingesting ``rows`` first if it is new); see the module doc.

    ``rows`` is only read when the journal has not ingested the input yet, so a lazy
    :func:`~runner.batch.inputs.read_rows` costs nothing on resume. ``budget`` holds the
    batch caps; spend already in the journal is added to it first, and its wall clock counts
    from the batch's first attempt. ``ledger`` (the run store) corrects the spend of rows a
    crash interrupted, which the journal never heard of. ``base_options`` is the template for
    each row's options (default: ``RunOptions(write_report=False)``). ``select`` (row numbers: a
    trial run's rows) runs only those; the others stay pending for a later run. ``retry_failed``
    gives every failed row one attempt more, also when its attempts are used up or its failure
    was final.
    """
    if concurrency < 1 or max_attempts < 1:
        raise ValueError("concurrency and max_attempts must be at least 1")
    if not journal.ingested:
        journal.ingest(rows)
    resumed = journal.prepare_resume()
    for number, run_id in resumed.interrupted_runs:
        # what a dead worker held for the row in a shared scope: counted once, as spent (as recorded, when it was)
        budget.take_over(run_id, ledger.recorded_calls(run_id) if ledger is not None else None)
        if ledger is not None:
            journal.correct_usage(number, ledger.spent(run_id))
    budget.add_spend(journal.spent())
    budget.count_from(journal.age_seconds())
    batch = _Batch(
        journal=journal,
        executor=executor,
        budget=budget,
        max_attempts=max_attempts,
        policy=failure_policy or FailurePolicy(),
        rate_gate=rate_gate,
        progress=progress or NoProgress(),
        base_options=base_options or RunOptions(write_report=False),
        select=frozenset(select) if select is not None else None,
        retry_failed=retry_failed,
    )
    await batch.run(concurrency)
    closing = closing_figures(journal, max_attempts, batch.select)
    return BatchSummary(
        batch_id=journal.batch_id,
        counts=journal.counts(),
        usage=journal.spent(),
        elapsed_seconds=round(time.monotonic() - batch.started, 3),
        stop_reason=batch.stop_reason,
        stop_kind=batch.stop_kind,
        interrupted_rows=resumed.interrupted,
        attempts_here=batch.attempts,
        not_retried=closing.not_retried,
        outside_selection=closing.outside_selection,
    )


@dataclass(frozen=True)
class ClosingFigures:
    """What the end of a run tells besides the counts: failed rows a rerun would not retry, by why,
    and rows a trial did not select that are still to run."""

    not_retried: dict[str, int]
    outside_selection: int = 0


ATTEMPTS_USED_UP = "attempts used up"
"""The :attr:`ClosingFigures.not_retried` reason of retryable rows that reached ``max_attempts``."""


def closing_figures(journal: BatchJournal, max_attempts: int, select: Collection[int] | None = None) -> ClosingFigures:
    """One pass over the journal: failed rows not retried by a rerun (``attempts used up``, or the
    error kind of a final failure), and rows outside ``select`` not done."""
    reasons: dict[str, int] = {}
    outside = 0
    for row in journal.records(unfinished_only=True):
        if select is not None and row.number not in select:
            outside += 1
            continue
        if row.status == "failed" and not (row.retryable and row.attempts < max_attempts):
            reason = ATTEMPTS_USED_UP if row.retryable else row.error_kind or "failed"
            reasons[reason] = reasons.get(reason, 0) + 1
    return ClosingFigures(reasons, outside)


class _Batch:
    """The state shared by the workers of one ``run_batch`` call (event loop thread only)."""

    def __init__(
        self,
        *,
        journal: BatchJournal,
        executor: RowExecutor,
        budget: Budget,
        max_attempts: int,
        policy: FailurePolicy,
        rate_gate: RateGate | None,
        progress: BatchProgress,
        base_options: RunOptions,
        select: frozenset[int] | None = None,
        retry_failed: bool = False,
    ) -> None:
        self.journal, self.executor, self.budget = journal, executor, budget
        self.max_attempts, self.policy, self.rate_gate = max_attempts, policy, rate_gate
        self.progress, self.base_options, self.select = progress, base_options, select
        self.todo: Iterator[JournalRow] = itertools.chain(self._todo(), self._once_more() if retry_failed else ())
        self.in_flight = self.failures = self.attempts = self.retries_waiting = 0
        self.stop_reason: str | None = None
        self.stop_kind: str | None = None
        self.started = time.monotonic()
        self._wake = asyncio.Event()

    def _todo(self) -> Iterator[JournalRow]:
        """The journal's rows to run (only the selected ones, for a trial)."""
        rows = self.journal.todo(self.max_attempts)
        return rows if self.select is None else (row for row in rows if row.number in self.select)

    def _once_more(self) -> Iterator[JournalRow]:
        """``--retry-failed``: failed rows the journal would not run again (attempts used up, or a final failure)."""
        failed = [row.number for row in self.journal.records(unfinished_only=True) if row.status == "failed"
                  and not (row.retryable and row.attempts < self.max_attempts)]  # fmt: skip
        for number in failed:
            row = self.journal.row(number)
            if row is not None and row.status == "failed" and (self.select is None or number in self.select):
                yield row

    async def run(self, concurrency: int) -> None:
        counts = self.journal.counts()
        valid = sum(counts.values()) - counts["invalid"]
        if self.select is not None:
            valid, done = len(self.select), sum(row.status == "done" for row in self._selected())
        else:
            done = counts["done"]
        self.progress.start(valid, done, self.budget.spent.cost_usd)
        try:
            with commit_group():  # the rows' writes share transactions (runner.store.group_commit)
                async with asyncio.TaskGroup() as workers:
                    for _ in range(concurrency):
                        workers.create_task(self._worker())
        except asyncio.CancelledError:
            self.journal.mark_not_run("interrupted before this row started", INTERRUPTED)
            raise
        except BaseExceptionGroup as group:  # a bug in the engine or a journal I/O error: surface it plainly
            raise group.exceptions[0] from None
        finally:
            self.progress.close()
        if self.stop_reason is not None:
            self.journal.mark_not_run(self.stop_reason, self.stop_kind or "stopped")

    def _selected(self) -> Iterator[JournalRow]:
        return (row for row in self.journal.records() if self.select is not None and row.number in self.select)

    async def _worker(self) -> None:
        while (row := await self._next_row()) is not None:
            self.in_flight += 1
            try:
                await self._run_row(row)
            finally:
                self.in_flight -= 1
                self._notify()

    async def _next_row(self) -> JournalRow | None:
        """The next row to run, waiting while rows in flight may still need a retry.

        Rows come from passes over the journal in input order. A failed attempt that may
        be retried is picked up by the next pass, which starts once the current one is
        exhausted, so retries come after the fresh rows and memory holds one page only.
        """
        while self.stop_reason is None:
            row = next(self.todo, None)
            if row is not None:
                return row
            if self.retries_waiting:
                self.retries_waiting = 0
                self.todo = self._todo()
                continue
            if self.in_flight == 0:
                self._notify()  # let idle workers see that nothing is left
                return None
            await self._wake.wait()
        return None

    async def _run_row(self, row: JournalRow) -> None:
        try:
            self.budget.check_can_start()
        except CapReached as exc:
            self._stop(str(exc), exc.cap)  # this row stays pending, so it becomes not_run
            return
        assert row.id is not None and row.inputs is not None  # invalid rows are never todo
        run_id = batch_run_id(self.journal.batch_id, row.id)
        attempt = self.journal.mark_running(row.number, run_id)
        await durable()  # the attempt counts (a crash from here on resumes it as interrupted) before it runs
        self.attempts += 1
        options = replace(self.base_options, run_id=run_id, parent_budget=self.budget, rate_gate=self.rate_gate,
                          replay_answers=self.base_options.replay_answers or stopped_from_outside(row))  # fmt: skip
        started = time.monotonic()
        crashed = False
        try:
            result = await self.executor(dict(row.inputs), options)
        except asyncio.CancelledError:
            self.journal.record(row.number, _interrupted(time.monotonic() - started))
            raise
        except RowDeferred as deferred:  # goes on when the command runs again; not a failure, so not an attempt
            self.journal.record(row.number, RowOutcome("not_run", error=str(deferred), error_kind=deferred.kind, counts_attempt=False))
            self.attempts -= 1
            self.progress.row_finished("not_run", self.budget.spent.cost_usd)
            return
        except CapReached as exc:  # the contract is a 'capped' result, but treat it the same
            result = RunResult(
                run_id, "", "capped", error=str(exc), error_kind=exc.cap, error_scope=exc.scope, error_budget=exc.budget
            )
        except Exception as exc:  # the row's isolation boundary: a bug in one row must not stop the batch
            result, crashed = _crash_result(run_id, exc), True
        outcome = replace(self._outcome(result), duration_seconds=round(time.monotonic() - started, 6))
        if crashed:  # spend unknown: keep what earlier attempts recorded rather than erase it
            outcome = replace(outcome, usage=None)
        self.journal.record(row.number, outcome)
        self._after(attempt, outcome)

    def _outcome(self, result: RunResult) -> RowOutcome:
        met = RowOutcome(
            "done", usage=result.usage, warnings=result.warnings, budget_warnings=result.budget_warnings,
            degraded=result.degraded,
        )
        if result.status == "completed":
            return replace(met, output=result.output)
        error = redact(result.error or result.status, [self.base_options.api_key])
        kind = result.error_kind or result.status
        if (result.status == "capped" and self._batch_cap_reached(result)) or kind == QUOTA_EXCEEDED:
            self._stop(error, kind)  # a provider's spend ceiling refuses every row alike: they run again once it is raised
            return replace(met, status="not_run", error=error, error_kind=kind)
        final = result.status in ("capped", "stuck") or kind in FINAL_ERROR_KINDS
        return replace(met, status="failed", error=error, error_kind=kind, retryable=not final)

    def _batch_cap_reached(self, result: RunResult) -> bool:
        """Whether a capped run was stopped by the batch's cap (or a scope around it, such as a
        fan-out's shared scope) rather than its own."""
        try:
            self.budget.check_can_start()
        except CapReached:
            return True
        if result.error_budget is not None:  # a budget over time spans every batch: its rows wait for the next window
            return True
        return result.error_scope in {scope.scope for scope in self.budget.chain()}

    def _after(self, attempt: int, outcome: RowOutcome) -> None:
        retry = outcome.status == "failed" and outcome.retryable and attempt < self.max_attempts
        if retry:
            self.retries_waiting += 1
        self.progress.row_finished("retrying" if retry else outcome.status, self.budget.spent.cost_usd)
        if outcome.status == "failed":
            self.failures += 1
            limit = self.policy.stop_after
            if limit is not None and self.failures >= limit:
                reason = f"stopped after {self.failures} failed attempts (failure policy: stop after {limit})"
                self._stop(reason, "failure_policy")

    def _stop(self, reason: str, kind: str) -> None:
        if self.stop_reason is None:
            self.stop_reason, self.stop_kind = reason, kind
            self._notify()

    def _notify(self) -> None:
        """Wake every worker waiting in ``_next_row`` (each re-checks; no wake-up is lost)."""
        self._wake.set()
        self._wake = asyncio.Event()


def stopped_from_outside(row: JournalRow) -> bool:
    """Whether the row's last attempt was cut short by something outside its run (a budget or a
    batch cap, a provider's quota, a provider batch still out, an interrupt, a crash): its next
    attempt resumes it, replaying the answers it was given, instead of paying for them again.
    A row that failed on its own starts over."""
    return row.attempts > 0 and (row.status == "pending" or row.error_kind == INTERRUPTED)


def _interrupted(took: float) -> RowOutcome:
    return RowOutcome(
        "failed",
        error="interrupted: the batch was cancelled while this row was running",
        error_kind=INTERRUPTED,
        retryable=True,
        duration_seconds=round(took, 6),
    )


def _crash_result(run_id: str, exc: Exception) -> RunResult:
    """A failed result for an exception the executor should not have raised."""
    if isinstance(exc, InputError):
        return RunResult(run_id, "", "failed", error=str(exc), error_kind="input")
    if isinstance(exc, ModelError):
        return RunResult(run_id, "", "failed", error=str(exc), error_kind=exc.kind)
    if isinstance(exc, WorkspaceTampered):
        return RunResult(run_id, "", "failed", error=str(exc), error_kind="workspace")
    if isinstance(exc, ConfigError | UsageError | SandboxUnavailable):
        return RunResult(run_id, "", "failed", error=str(exc), error_kind="config")
    return RunResult(run_id, "", "failed", error=f"{type(exc).__name__}: {exc}", error_kind="internal_error")
