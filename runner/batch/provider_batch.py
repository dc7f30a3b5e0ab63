"""``runner batch --via batch-api``: the rows sent as one provider batch (the OpenAI Batch API).

Each pending row becomes one request line (:mod:`runner.batch.provider_requests`), its
worst case reserved at batch prices against the batch caps; rows that do not fit are
recorded ``not_run`` and not sent. The lines are uploaded as a file, one batch is created
and its id is recorded in the journal *before* waiting, so a resume after ``kill -9``
re-attaches to that batch instead of paying for the rows twice. The batch is polled with
backoff; when it ends, every line of its output and error files is recorded against its
row (``custom_id`` is the row number): ``done`` with the answer and its usage priced at
batch prices, or ``failed`` with the line's error (retryable unless the request itself
was refused). A row the provider never answered is recorded failed too.

Submitted rows are ``running`` while the batch is out; only a re-attach records them.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import IO, Any

from runner.agent.checks import parse_json_answer
from runner.batch.engine import batch_budget, batch_run_id
from runner.batch.inputs import Row
from runner.batch.journal import BatchJournal, RowOutcome
from runner.batch.provider_requests import CHAT_COMPLETIONS, RequestBuilder
from runner.batch.summary import BatchSummary
from runner.caps.budget import Budget, Reservation
from runner.caps.pricing import needs_exact_prompt
from runner.config.specs import Caps
from runner.config.templates import TemplateError
from runner.core.usage import Usage
from runner.errors import CapReached, InputError, ModelError
from runner.model.wire import InvalidResponse, parse_completion

FINISHED = frozenset({"completed", "failed", "expired", "cancelled"})
"""Provider batch statuses that will not change again."""
FINAL_STATUS_KINDS = {400: "bad_request", 401: "auth", 403: "auth", 404: "not_found", 422: "bad_request"}
"""A line refused for what it asked: the live engine would be refused too, so no retry."""


@dataclass(frozen=True)
class PollPolicy:
    """How often a provider batch is retrieved: ``first_seconds``, growing by ``factor`` up to ``max_seconds``."""

    first_seconds: float = 30.0
    max_seconds: float = 600.0
    factor: float = 1.5

    def waits(self) -> Iterator[float]:
        wait = self.first_seconds
        while True:
            yield wait
            wait = min(wait * self.factor, max(self.max_seconds, self.first_seconds))


@dataclass
class _Submission:
    """The rows sent in this call: their reservations, and why later rows were not sent."""

    lines: list[dict[str, Any]]
    reservations: dict[int, Reservation]
    stop_reason: str | None = None
    stop_kind: str | None = None


async def run_provider_batch(
    journal: BatchJournal,
    rows: Iterable[Row],
    builder: RequestBuilder,
    *,
    caps: Caps | None = None,
    row_caps: Caps | None = None,
    max_attempts: int = 2,
    poll: PollPolicy | None = None,
    log: IO[str] | None = sys.stderr,
    wait: bool = True,
) -> BatchSummary:
    """Send the journal's pending rows as one provider batch (or re-attach to the one it
    recorded), wait for it and record every row; see the module doc.

    ``wait=False`` returns as soon as the provider batch is out and has not ended, with its id
    in ``pending`` and its rows still ``running`` (an Airflow trigger waits for it instead);
    calling again with the same journal re-attaches and collects it."""
    started = time.monotonic()
    if not journal.ingested:
        journal.ingest(rows)
    client = _client(builder)
    submission = _Submission([], {})
    try:
        provider_id = journal.provider_batch_id
        if provider_id is None:
            journal.prepare_resume()
            submission = _reserve_rows(journal, builder, _budget(journal, caps or Caps()), row_caps or Caps(), max_attempts)
            if submission.lines:
                provider_id = await _submit(client, journal, submission.lines)
        elif log is not None:
            print(f"re-attaching to provider batch {provider_id}", file=log)
        if provider_id is not None:
            if not wait:
                batch = await _call(client, client.batches.retrieve(provider_id))
                if batch.status not in FINISHED:
                    if submission.stop_reason is not None:
                        journal.mark_not_run(submission.stop_reason, submission.stop_kind or "stopped")
                    return BatchSummary(
                        batch_id=journal.batch_id, counts=journal.counts(), usage=journal.spent(),
                        elapsed_seconds=round(time.monotonic() - started, 3), stop_reason=submission.stop_reason,
                        stop_kind=submission.stop_kind, attempts_here=len(submission.lines), pending=(provider_id,),
                    )
            batch = await _wait(client, provider_id, poll or PollPolicy(), log)
            await _collect(client, journal, batch, builder, submission.reservations, time.monotonic() - started)
            journal.provider_batch_collected()
    finally:
        await client.close()
    if submission.stop_reason is not None:
        journal.mark_not_run(submission.stop_reason, submission.stop_kind or "stopped")
    return BatchSummary(
        batch_id=journal.batch_id, counts=journal.counts(), usage=journal.spent(),
        elapsed_seconds=round(time.monotonic() - started, 3), stop_reason=submission.stop_reason,
        stop_kind=submission.stop_kind, attempts_here=len(submission.lines),
    )


def _budget(journal: BatchJournal, caps: Caps) -> Budget:
    """The batch budget, holding what the journal already spent, its clock from the batch's start."""
    budget = batch_budget(caps)
    budget.add_spend(journal.spent())
    budget.count_from(journal.age_seconds())
    return budget


def _row_budget(batch: Budget, builder: RequestBuilder, row_caps: Caps) -> Budget:
    """A row's scopes as a live run has them: the task's caps (tightened by the row flags), the agent's."""
    task = batch.child(builder.task.caps.tighten(row_caps), "task")
    return task.child(builder.agent.caps, "step 'main'")


# --- submitting ------------------------------------------------------------------------


def _reserve_rows(
    journal: BatchJournal, builder: RequestBuilder, budget: Budget, row_caps: Caps, max_attempts: int
) -> _Submission:
    """Build and reserve each row to run, in input order, until one does not fit the batch caps
    (a row its own caps refuse is recorded failed, like a live run that is capped)."""
    submission = _Submission([], {})
    exact = needs_exact_prompt(budget, rate_limited=False)
    for row in journal.todo(max_attempts):
        assert row.id is not None and row.inputs is not None  # invalid rows are never todo
        run_id = batch_run_id(journal.batch_id, row.id)
        try:
            built = builder.row(row.number, dict(row.inputs), run_id, exact=exact)
        except (InputError, TemplateError) as exc:
            journal.mark_running(row.number, run_id)
            kind = "input" if isinstance(exc, InputError) else "template"
            journal.record(row.number, RowOutcome("failed", error=str(exc), error_kind=kind, retryable=False))
            continue
        try:
            reservation = _row_budget(budget, builder, row_caps).reserve(built.estimate)
        except CapReached as cap:
            if cap.scope in {scope.scope for scope in budget.chain()}:
                submission.stop_reason, submission.stop_kind = str(cap), cap.cap
                break
            journal.mark_running(row.number, run_id)  # its own caps refuse it, as the live run would be capped
            journal.record(row.number, RowOutcome("failed", error=str(cap), error_kind=cap.cap, retryable=False))
            continue
        journal.mark_running(row.number, run_id)
        submission.lines.append(built.line)
        submission.reservations[row.number] = reservation
    return submission


async def _submit(client: Any, journal: BatchJournal, lines: list[dict[str, Any]]) -> str:
    """Upload the lines, create the batch and record its id before anything waits on it."""
    content = "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines).encode()
    uploaded = await _call(client, client.files.create(file=(f"{journal.batch_id}.jsonl", content), purpose="batch"))
    batch = await _call(client, client.batches.create(
        input_file_id=uploaded.id, endpoint=CHAT_COMPLETIONS, completion_window="24h",
        metadata={"runner_batch_id": journal.batch_id},
    ))
    journal.record_provider_batch(batch.id)
    return str(batch.id)


async def _wait(client: Any, provider_id: str, poll: PollPolicy, log: IO[str] | None) -> Any:
    """Retrieve the batch with backoff until it has ended; returns it."""
    waits = poll.waits()
    seen = None
    while True:
        batch = await _call(client, client.batches.retrieve(provider_id))
        if log is not None and batch.status != seen:
            counts = batch.request_counts
            done = f" ({counts.completed + counts.failed}/{counts.total} answered)" if counts is not None else ""
            print(f"provider batch {provider_id}: {batch.status}{done}", file=log)
            seen = batch.status
        if batch.status in FINISHED:
            return batch
        await asyncio.sleep(next(waits))


# --- recording -------------------------------------------------------------------------


async def _collect(
    client: Any, journal: BatchJournal, batch: Any, builder: RequestBuilder, reservations: dict[int, Reservation], took: float
) -> None:
    """Record every running row from the batch's output and error files (a row answered in
    neither, or a batch that failed validation, is recorded failed)."""
    lines = [*await _lines(client, batch.output_file_id), *await _lines(client, batch.error_file_id)]
    for line in lines:
        number = _row_number(line.get("custom_id"))
        if number is None:
            continue
        outcome = _outcome(journal, number, line, builder, round(took, 6))
        if journal.record(number, outcome):
            reservation = reservations.get(number)
            if reservation is not None:
                reservation.settle(outcome.usage or Usage()) if outcome.usage is not None else reservation.release()
    missing = _missing_error(batch)
    for row in list(journal.records()):
        if row.status == "running":
            journal.record(row.number, RowOutcome("failed", error=missing[0], error_kind=missing[1], retryable=missing[2]))
            if row.number in reservations:
                reservations[row.number].release()


def _missing_error(batch: Any) -> tuple[str, str, bool]:
    """Why a submitted row has no line: the batch failed validation (final), or the provider lost it."""
    if batch.status == "failed":
        found = [f"{e.code}: {e.message}" for e in (batch.errors.data if batch.errors and batch.errors.data else [])]
        return f"provider batch {batch.id} failed validation: {'; '.join(found) or 'no detail'}", "batch_failed", False
    return f"provider batch {batch.id} ended {batch.status} without an answer for this row", f"batch_{batch.status}", True


def _outcome(journal: BatchJournal, number: int, line: dict[str, Any], builder: RequestBuilder, took: float) -> RowOutcome:
    """A line of the output or error file as a row outcome."""
    response = line.get("response") if isinstance(line.get("response"), dict) else None
    status = response.get("status_code") if response else None
    if response is not None and status == 200:
        return _answered(journal, number, response.get("body"), builder, took)
    error = line.get("error") if isinstance(line.get("error"), dict) else None
    if error is not None:
        kind = str(error.get("code") or "batch_error")
        return RowOutcome("failed", error=str(error.get("message") or kind), error_kind=kind, duration_seconds=took)
    final = FINAL_STATUS_KINDS.get(status) if isinstance(status, int) else None
    kind = final or ("rate_limited" if status == 429 else "server_error")
    return RowOutcome(
        "failed", error=f"HTTP {status}: {_message(response)}", error_kind=kind, retryable=final is None, duration_seconds=took,
    )


def _answered(journal: BatchJournal, number: int, body: Any, builder: RequestBuilder, took: float) -> RowOutcome:
    """A completion as the live loop would take it: the answer, parsed by the output schema if any."""
    try:
        answer = parse_completion(body)
    except InvalidResponse as exc:
        return RowOutcome("failed", error=f"invalid response: {exc}", error_kind="invalid_response", duration_seconds=took)
    spent = answer.usage
    usage = Usage(spent.input_tokens, spent.output_tokens, spent.cached_input_tokens, builder.pricer.cost(spent), model_calls=1)
    before = journal.row(number)
    usage = usage + (before.usage if before else Usage())
    if builder.schema is None:
        return RowOutcome("done", output=answer.content, usage=usage, duration_seconds=took)
    value, problems = parse_json_answer(answer.content, builder.schema)
    if problems:  # the live loop would ask for a repair; --batch-fallback live gives the row that turn
        error = f"output does not match the schema: {problems}"
        return RowOutcome("failed", output=answer.content, error=error, error_kind="output_schema", usage=usage, duration_seconds=took)
    return RowOutcome("done", output=value, usage=usage, duration_seconds=took)


def _message(response: dict[str, Any] | None) -> str:
    body = response.get("body") if response else None
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and error.get("message"):
        return str(error["message"])[:500]
    return "no detail"


def _row_number(custom_id: object) -> int | None:
    try:
        return int(str(custom_id))
    except ValueError:
        return None


async def _lines(client: Any, file_id: str | None) -> list[dict[str, Any]]:
    if not file_id:
        return []
    content = await _call(client, client.files.content(file_id))
    found: list[dict[str, Any]] = []
    for text in content.text.splitlines():
        if text.strip():
            try:
                line = json.loads(text)
            except ValueError:
                continue  # a garbled line leaves its row running, so it is recorded as missing
            if isinstance(line, dict):
                found.append(line)
    return found


# --- the client ------------------------------------------------------------------------


def _client(builder: RequestBuilder) -> Any:
    import openai

    endpoint = builder.endpoint
    try:
        return openai.AsyncOpenAI(base_url=endpoint.base_url, api_key=endpoint.api_key, max_retries=3,
                                  timeout=builder.agent.model.timeout_seconds)
    except openai.OpenAIError:
        pass
    raise ModelError("auth", "no API key: set the environment variable named by the agent's model api_key_env, or OPENAI_API_KEY")


async def _call(client: Any, pending: Any) -> Any:
    """Await one Files/Batches call; an endpoint failure becomes a :class:`ModelError`."""
    from runner.model.openai_faults import ENDPOINT_EXCEPTIONS, classify

    try:
        return await pending
    except ENDPOINT_EXCEPTIONS as exc:
        fault = classify(exc, (client.api_key,))
    raise fault.to_error(1)
