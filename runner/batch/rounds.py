"""Rounds of a provider batch: every row's k-th model call goes out in one provider batch.

Under ``runner batch --via batch-api`` the rows run through the live engine as usual (the
agent loop, its tools, checks, repairs, caps reserved before each call and the write-ahead
call ledger), but their model calls come here instead of going over HTTP
(:class:`~runner.batch.round_model.BatchRoundModel`). A call waits in the next round. When
every row in flight is waiting on a call (none is running a tool or thinking), the round is
sealed: its calls are split into provider batches (one model at one endpoint each, within
:class:`~runner.config.specs.BatchApiLimits`), each is uploaded and created (an intent
written to the journal first, the batch id right after: :mod:`runner.batch.provider_state`),
polled with backoff, and its lines are handed back to the waiting calls. Every answer is
kept in the run store first (:class:`~runner.store.provider_answers.ProviderAnswers`), so a
resumed run is answered from there and nothing is paid twice.

- A call whose caller is gone when its answer arrives (cut off at a wall-clock cap, or its
  process killed) still settles its reservation in the run store with what it used.
- When no caller is left waiting on a provider batch (every row reached its deadline), the
  batch is cancelled; what it answered before it ended is collected (it was billed). Not when
  the command is interrupted (Ctrl-C, SIGTERM): the batch is kept for a rerun to collect.
- ``wait=False``: once a round is out and not finished, the rows in flight stop where they
  are (recorded ``not_run``; :class:`~runner.batch.executor.RowDeferred`) and the command
  returns with the batches' ids; the next run of the command collects them (:meth:`resume`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from typing import IO, Any

from runner.agent.ledger import BILLABLE_FAULTS
from runner.batch.batch_flavours import BatchClient, BatchTarget, batch_client, split, split_limits
from runner.batch.journal import BatchJournal
from runner.batch.provider_api import FINISHED, PollPolicy
from runner.batch.provider_state import BatchPart, ProviderState, UnneededFile
from runner.caps.budget import Budget
from runner.caps.pricing import Pricer
from runner.config.specs import BatchApiLimits
from runner.core.calls import ModelCallEntry
from runner.core.usage import Usage
from runner.endpoints import DEFAULT_BASE_URL, safe_url
from runner.errors import ModelError
from runner.model.answers import parse_answer
from runner.model.base import ModelRequest
from runner.model.endpoint import Endpoint
from runner.model.faults import RETRYABLE_KINDS
from runner.model.fingerprint import request_fingerprint
from runner.model.wire import InvalidResponse
from runner.redact import redact_secrets
from runner.store.provider_answers import ProviderAnswers, hashed_call_id
from runner.store.provider_tools import ProviderToolResults
from runner.store.runstore import RunStore

CURRENT_RUN: ContextVar[str | None] = ContextVar("runner_provider_batch_run", default=None)
"""The run id of the row a model call belongs to (set for each row's task)."""
CANCEL_POLL_SECONDS = 5.0
"""How often a cancelled provider batch is looked at (at most) until it ends."""
STEADY_TURNS = 3
"""Event-loop turns a sealable round must stay so: a row just handed out by the engine has
registered by then (registering happens before its first await)."""


@dataclass(frozen=True)
class LineError:
    """A call its provider batch did not answer: the kind and message a live call's error has."""

    kind: str
    message: str

    def error(self) -> ModelError:
        return ModelError(self.kind, self.message)

    @classmethod
    def of(cls, error: ModelError) -> LineError:
        return cls(error.kind, str(error).removeprefix(f"model endpoint error ({error.kind}): "))


Answer = dict[str, Any] | LineError
"""A completion body, or why there is none."""


@dataclass
class _Call:
    """One model call waiting for a round, and the callers waiting on its answer."""

    run_id: str
    fingerprint: str
    custom_id: str
    endpoint: Endpoint
    line: bytes
    waiters: list[asyncio.Future[Answer]] = field(default_factory=list)

    @property
    def group(self) -> tuple[str, str]:
        return endpoint_key(self.endpoint), self.endpoint.model_id

    def waited(self) -> bool:
        return any(not waiter.done() for waiter in self.waiters)


def endpoint_key(endpoint: Endpoint) -> str:
    """How the journal names an endpoint: its base URL without credentials."""
    return safe_url(endpoint.base_url or DEFAULT_BASE_URL)


class RoundCollector:
    """The rounds of one batch (see the module doc). Open with ``async with``; register each
    row's task with :meth:`enter` / :meth:`leave` (:class:`~runner.batch.round_model.RoundRows`)."""

    def __init__(
        self, journal: BatchJournal, store: RunStore, *, endpoints: Iterable[BatchTarget], prices: Callable[[str], Pricer],
        deadline: Budget, limits: BatchApiLimits | None = None, poll: PollPolicy | None = None, wait: bool = True,
        fallback_live: bool = False, secrets: list[str] | None = None, log: IO[str] | None = None,
        notices: IO[str] | None = None,
    ) -> None:
        self.journal, self.store, self.state = journal, store, ProviderState(journal)
        self.answers = ProviderAnswers(store.database)
        ProviderToolResults(store.database)  # the rows' tool results are kept there (runner.agent.replay)
        endpoints = list(endpoints)
        self.endpoints = {endpoint_key(t.endpoint): t.endpoint for t in endpoints}
        self.apis = {(endpoint_key(t.endpoint), t.endpoint.model_id): t.api for t in endpoints}
        self.prices, self.deadline, self.limits = prices, deadline, limits
        self.poll, self.wait, self.fallback_live = poll or PollPolicy(), wait, fallback_live
        self.secrets, self.log, self.notices = secrets or [], log, notices
        self.deferral: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting: dict[str, int] = {}  # run id -> its calls not answered yet, for each row in flight
        self._blocked = 0  # rows in flight with a call not answered yet
        self._queue: dict[str, _Call] = {}  # custom id -> call, for the next round
        self._flight: list[_Call] = []  # the calls of the round out now
        self._changed = asyncio.Event()  # a row entered or left, or a call joined the queue
        self._gone = asyncio.Event()  # a caller stopped waiting
        self._version = 0
        self._settled: set[str] = set()  # runs whose calls were settled after their caller had gone
        self._clients: dict[str, BatchClient] = {}
        self._driver: asyncio.Task[None] | None = None
        self._closing = False
        self._command = asyncio.current_task()  # cancelled: the command is interrupted (Ctrl-C, SIGTERM)

    @property
    def interrupted(self) -> bool:
        """The command is being interrupted (Ctrl-C, SIGTERM): its rows stop, but the provider
        batches out are kept (a rerun re-attaches to them and pays nothing twice), never cancelled."""
        return self._command is not None and self._command.cancelling() > 0

    # --- the rows ----------------------------------------------------------------------

    @property
    def pending(self) -> tuple[str, ...]:
        """The provider batches out now (empty when every round was collected)."""
        return self.state.out_ids

    def enter(self, run_id: str) -> None:
        """A row's run started: rounds wait for it to reach its next call or end."""
        self._waiting[run_id] = 0
        self._touch()

    def leave(self, run_id: str) -> None:
        if self._waiting.pop(run_id, 0):
            self._blocked -= 1
        self._touch()

    def _waits(self, run_id: str, change: int) -> None:
        """``run_id`` has ``change`` more (or fewer) calls not answered yet."""
        if run_id not in self._waiting:
            return
        before = self._waiting[run_id]
        self._waiting[run_id] = before + change
        self._blocked += (self._waiting[run_id] > 0) - (before > 0)

    async def send(self, endpoint: Endpoint, request: ModelRequest, ledger_id: int | None) -> Answer:
        """Wait for the answer to ``request`` from the next round (the caller's row is :data:`CURRENT_RUN`)."""
        run_id = CURRENT_RUN.get()
        if run_id is None or run_id not in self._waiting:
            raise RuntimeError("a provider batch call outside a registered row")  # our bug: rows always register
        fingerprint = request_fingerprint(request)
        kept = self.answers.take_error(run_id, fingerprint)
        if kept is not None:  # its line failed after an earlier caller had gone: this one fails as that one would have
            return LineError(*kept)
        self.answers.sent(run_id, fingerprint, ledger_id)  # before it is handed over: a late answer can settle it
        call = self._queued(run_id, fingerprint, endpoint, request)
        future: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        call.waiters.append(future)
        self._waits(run_id, +1)
        self._touch()
        try:
            return await future
        finally:
            if future.cancelled() or not future.done():  # the caller was cancelled (a deadline, the command returning)
                future.cancel()
                self._waits(run_id, -1)
                self._gone.set()

    def _queued(self, run_id: str, fingerprint: str, endpoint: Endpoint, request: ModelRequest) -> _Call:
        client = self._client(endpoint_key(endpoint))
        custom_id = client.call_id(run_id, self.journal.batch_id, fingerprint)
        call = self._queue.get(custom_id)
        if call is None:
            # A batch line bills at the batch price: no service tier goes with it.
            encoded = client.line(custom_id, replace(request, service_tier=None), endpoint.model_id)
            call = self._queue[custom_id] = _Call(run_id, fingerprint, custom_id, endpoint, encoded)
        return call

    def _touch(self) -> None:
        self._version += 1
        self._changed.set()

    # --- opening and closing -----------------------------------------------------------

    async def __aenter__(self) -> RoundCollector:
        self._driver = asyncio.create_task(self._drive())
        return self

    async def __aexit__(self, exc_type: object, *rest: object) -> None:
        assert self._driver is not None
        self._closing = True
        self._touch()
        if exc_type is not None:
            self._driver.cancel()
        try:
            await asyncio.wait({self._driver})
            if exc_type is None:
                self._driver.result()  # a failure of the rounds themselves surfaces here
                self._correct_rows()
        finally:
            for client in self._clients.values():
                await client.close()

    async def resume(self) -> bool:
        """Settle what an earlier process left: find the batches it may have created without
        recording them, then wait for every batch out and collect it. ``False`` when not
        waiting (``wait=False``) and one is still running: the caller returns with it pending."""
        for intent in list(self.state.intents):
            client = self._client(intent.endpoint)
            try:
                found = await client.find_settled(
                    intent, intent.metadata(self.journal.batch_id), intent.file_id, self._expected(client, intent), set(self.state.out_ids)
                )
            except ModelError as exc:  # its create may still land: the intent stays, the next run looks again
                self._notice(f"could not tell yet whether provider batch round {intent.round} part {intent.part} was "
                             f"created ({exc}); the next run looks for it again")  # fmt: skip
                continue
            if found is not None:
                self._say(f"found provider batch {found} (round {intent.round}) created before the last process ended")
                self.state.created(intent, found)
            else:
                self._never_sent(intent)
                self.state.dropped(intent)
        self._settle_unsent()
        await self.delete_unneeded_files()  # the files of batches never created, and what an earlier run left
        out = {batch.id: batch.part for batch in self.state.out}
        if out:
            self._say(f"re-attaching to provider batch(es) {', '.join(out)}")
        finished = await self._await({pid: (part, None) for pid, part in out.items()}, self._before_deadline)
        self._correct_rows()
        await self.delete_unneeded_files()
        return finished

    async def delete_unneeded_files(self) -> None:
        """Delete from the provider the input files no batch needs any more (collected, or never
        created: :attr:`ProviderState.files`), every copy found by name included, except one that a
        batch not ended yet uses. What cannot be deleted now stays listed for the next run."""
        by_endpoint: dict[str, list[UnneededFile]] = defaultdict(list)
        for file in self.state.files:
            by_endpoint[file.endpoint].append(file)
        for endpoint, files in by_endpoint.items():
            try:
                await self._delete_files(self._client(endpoint), files)
            except ModelError as exc:
                names = ", ".join(f.id or f.name for f in files)
                self._notice(f"could not delete uploaded input file(s) {names} yet ({exc}); the next run tries again")

    async def _delete_files(self, client: BatchClient, files: list[UnneededFile]) -> None:
        since = min(f.at for f in files) - 600
        in_use = await client.files_in_use(since)
        copies = await client.uploaded({f.name for f in files}, since)
        deleted: list[str] = []
        for file in files:
            ids = dict.fromkeys([*([file.id] if file.id else []), *copies.get(file.name, [])])
            if in_use.intersection(ids):  # a batch that has not ended reads it: later
                continue
            for file_id in ids:
                await client.delete_file(file_id)
                deleted.append(file_id)
            self.state.deleted(file)
        if deleted:
            self._notice(f"deleted uploaded input file(s) {', '.join(deleted)}: no provider batch needs them any more")

    # --- the rounds --------------------------------------------------------------------

    async def _drive(self) -> None:
        try:
            while True:
                await self._changed.wait()
                self._changed.clear()
                if self._sealable() and await self._steady():
                    calls = self._seal()
                    if calls:
                        await self._round(calls)
                if self._closing and not self._waiting:  # no row in flight: what is queued has nobody waiting
                    self._not_sent(list(self._queue.values()))
                    self._queue.clear()
                    return
        except BaseException as exc:
            for call in [*self._queue.values(), *self._flight]:
                for waiter in call.waiters:
                    if not waiter.done():
                        waiter.set_exception(RuntimeError(f"the provider batch rounds stopped: {exc!r}"))
                        self._waits(call.run_id, -1)
            raise

    def _sealable(self) -> bool:
        """Some call is queued and every row in flight is waiting on one (when no round is out,
        every call not answered yet is in the queue); none once the command is returning with
        a round out (its rows are stopping)."""
        return bool(self._queue) and self._blocked == len(self._waiting) and not self.deferral.done()

    async def _steady(self) -> bool:
        version = self._version
        for _ in range(STEADY_TURNS):
            await asyncio.sleep(0)
        return version == self._version and self._sealable()

    def _seal(self) -> list[_Call]:
        waited: list[_Call] = []
        gone: list[_Call] = []
        for call in self._queue.values():
            (waited if call.waited() else gone).append(call)
        self._queue.clear()
        if gone:
            self._not_sent(gone)
            self._correct_rows()  # now: no round may follow for hours
        return waited

    def _not_sent(self, calls: list[_Call]) -> None:
        """Calls whose callers all left (a wall-clock cap) before their round went out are never
        sent: their reservations, counted at the worst case when the callers left, cost nothing."""
        for call in calls:
            ledger_id = self.answers.ledger_id(call.run_id, call.fingerprint)
            if ledger_id is not None:
                reason = LineError("not_sent", "its row stopped before its provider batch was sent")
                self._settle(call.run_id, ledger_id, call.endpoint.model_id, None, reason)

    async def _round(self, calls: list[_Call]) -> None:
        number = self.state.next_round()
        self._flight = calls
        try:
            out: dict[str, tuple[BatchPart, list[_Call] | None]] = {}
            for part, members in self._parts(number, calls):
                provider_id = await self._submit(part, members)
                if provider_id is not None:
                    out[provider_id] = (part, members)
            finished = await self._await(out, lambda members: any(c.waited() for c in members or ()))
            if not finished and not self.deferral.done():
                self.deferral.set_result(None)  # the rows stop here; the next command collects
        finally:
            self._flight = []
        self._correct_rows()
        await self.delete_unneeded_files()

    def _parts(self, number: int, calls: list[_Call]) -> list[tuple[BatchPart, list[_Call]]]:
        """The round's calls by model and endpoint, each group split within its Batch API's limits
        (the model profile's, lowered by the task's ``batch_api:`` block or the flags)."""
        groups: dict[tuple[str, str], list[_Call]] = defaultdict(list)
        for call in calls:
            groups[call.group].append(call)
        parts: list[tuple[BatchPart, list[_Call]]] = []
        for (endpoint, model), members in groups.items():
            api = self.apis.get((endpoint, model)) or next(a for (e, _), a in self.apis.items() if e == endpoint)
            max_requests, max_bytes = split_limits(api, self.limits)
            fitting = []
            for call in members:
                if len(call.line) > max_bytes:
                    message = f"the request is {len(call.line)} bytes, more than a provider batch may hold ({max_bytes})"
                    self._answer(call, LineError("batch_too_large", message))
                else:
                    fitting.append(call)
            for chunk in split([len(call.line) for call in fitting], max_requests, max_bytes):
                part = BatchPart(number, len(parts) + 1, model, endpoint, requests=len(chunk))
                parts.append((part, fitting[chunk.start : chunk.stop]))
        return parts

    async def _submit(self, part: BatchPart, members: list[_Call]) -> str | None:
        """Upload and create one provider batch (intent first, id right after); on failure its
        calls get the error (a batch the failed create may still have made is looked for)."""
        client = self._client(part.endpoint)
        self.answers.in_part([(c.run_id, c.fingerprint) for c in members], self._part_key(part))
        intent = self.state.intend(part)
        metadata = part.metadata(self.journal.batch_id)
        def uploaded(file_id: str) -> None:  # so a file whose batch is never made can be deleted
            nonlocal intent
            intent = self.state.uploaded(intent, file_id)

        try:
            provider_id = await client.submit(b"".join(c.line for c in members), intent, metadata, self.journal.batch_id, uploaded)
        except ModelError as exc:
            found = await self._created_anyway(client, metadata, intent)
            if found is None:
                failed = LineError.of(exc)
                if exc.kind in BILLABLE_FAULTS:  # surely not created: nothing was processed, nothing billed
                    failed = LineError("batch_not_created", f"the provider batch could not be created: {failed.message}")
                for call in members:
                    self._answer(call, failed)
                return None
            provider_id = found
        self.state.created(intent, provider_id)
        self._say(f"round {part.round}: provider batch {provider_id} with {len(members)} request(s) ({part.model})")
        return provider_id

    def _part_key(self, part: BatchPart) -> str:
        return f"{self.journal.batch_id}:{part.key}"

    def _expected(self, client: BatchClient, part: BatchPart) -> set[str]:
        """The ``custom_id`` of every call ``part`` holds."""
        return {client.call_id(run_id, self.journal.batch_id, fp) for run_id, fp in self.answers.calls_in(self._part_key(part))}

    def _calls_of(self, client: BatchClient, part: BatchPart) -> dict[str, tuple[str, str]]:
        """``custom_id -> (run id, fingerprint)`` of the calls ``part`` holds."""
        return {client.call_id(run_id, self.journal.batch_id, fp): (run_id, fp) for run_id, fp in self.answers.calls_in(self._part_key(part))}

    def _never_sent(self, intent: BatchPart) -> None:
        """The calls of a batch that was never created (its process died first) were not sent:
        settle their reservations at nothing."""
        for run_id, ledger_id in self.answers.unanswered_in(self._part_key(intent)):
            self._settle(run_id, ledger_id, intent.model, None, LineError("batch_not_created", "its provider batch was never created"))

    def _settle_unsent(self) -> None:
        """The calls an earlier process of this batch reserved but still held when it died (on
        their way to its queue, in it, or noted for a batch it never recorded an intent for) were
        not sent: their reservations, left in flight at the worst case, cost nothing. Asked once
        the intents are settled, before any row runs."""
        parts_out = {self._part_key(part) for part in [*self.state.intents, *(batch.part for batch in self.state.out)]}
        for run_id, ledger_id in self.answers.never_sent(f"{self.journal.batch_id}-", parts_out):
            if self.store.release_unsent(ledger_id, "its process ended before its provider batch was made"):
                self._settled.add(run_id)

    async def _created_anyway(self, client: BatchClient, metadata: dict[str, str], intent: BatchPart) -> str | None:
        """The batch a failed upload or create may still have made, or ``None`` (the intent is
        dropped when it surely made none and none can appear later: its input file is deleted
        before the last look, :meth:`ProviderClient.find_settled`; kept when that cannot be told:
        a resume looks again)."""
        try:
            found = await client.find_settled(
                intent, metadata, self.state.file_of(intent), self._expected(client, intent), set(self.state.out_ids)
            )
        except ModelError:
            return None
        if found is None:
            self.state.dropped(intent)  # (its calls' callers are still here: they settle them)
        return found

    async def _await(
        self, out: dict[str, tuple[BatchPart, list[_Call] | None]], wanted: Callable[[list[_Call] | None], bool]
    ) -> bool:
        """Poll the batches ``out`` with backoff until each has ended and is collected. One nobody
        wants any more (its callers cut off at a wall-clock cap) is cancelled at once, then looked
        at every few seconds until it ends (what it answered is collected) or its grace runs
        out. Not waiting: ``False`` as soon as one is still running after the first look."""
        waits, seen = self.poll.waits(), dict.fromkeys(out, "")
        cancelled: dict[str, float] = {}  # provider id -> when to stop waiting for it to end
        look = time.monotonic()
        while out:
            if time.monotonic() >= look:
                for provider_id, (part, members) in list(out.items()):
                    if await self._looked(provider_id, part, members, seen, cut_off=provider_id in cancelled):
                        del out[provider_id]
                    elif provider_id in cancelled and time.monotonic() > cancelled[provider_id]:
                        self._notice(f"provider batch {provider_id} did not end after its cancel; run the command again to collect it")
                        del out[provider_id]
                if out and not self.wait and not cancelled:
                    return False
                look = time.monotonic() + (self._cancel_poll() if cancelled else next(waits))
            for provider_id, (part, members) in out.items():
                if provider_id not in cancelled and not wanted(members) and not self.interrupted:
                    self._notice(f"provider batch {provider_id}: nobody waits for it any more (a wall-clock cap); cancelling it")
                    cancelled[provider_id] = self._grace_end()
                    with contextlib.suppress(ModelError):  # it may have ended meanwhile; the next look tells
                        await self._client(part.endpoint).cancel(provider_id)
                    look = min(look, time.monotonic() + self._cancel_poll(), cancelled[provider_id])
            if out:
                await self._nap(look - time.monotonic())
        return True

    def _grace_end(self) -> float:
        """Until when a cancelled batch is waited for: its grace, but never past the command's
        wall-clock deadline (past it, one more look collects what has ended, then the command
        ends; a rerun collects the rest)."""
        end = time.monotonic() + self.poll.cancel_grace_seconds
        deadline = self.deadline.deadline()
        return end if deadline is None else min(end, deadline.at)

    def _cancel_poll(self) -> float:
        return min(self.poll.first_seconds, CANCEL_POLL_SECONDS)

    async def _looked(
        self, provider_id: str, part: BatchPart, members: list[_Call] | None, seen: dict[str, str], *, cut_off: bool
    ) -> bool:
        """Look at one batch; ``True`` when it has ended (and is collected) or cannot be looked at.
        ``cut_off``: this process cancelled it (its callers were cut off at a cap)."""
        batch = await self._retrieve(part, provider_id, members)
        if batch is not None and batch.status not in FINISHED:
            if batch.status != seen[provider_id]:
                seen[provider_id] = batch.status
                self._say(f"provider batch {provider_id}: {batch.status}{_answered(batch)}")
            return False
        if batch is not None:
            await self._collect(batch, part, members, keep_failures=not cut_off)
        return True

    async def _retrieve(self, part: BatchPart, provider_id: str, members: list[_Call] | None) -> Any | None:
        """The batch's status; a failure that will not pass answers its calls with the error
        (``None``; the batch stays recorded out, so a rerun can still collect it)."""
        try:
            return await self._client(part.endpoint).retrieve(provider_id)
        except ModelError as exc:
            if exc.kind in RETRYABLE_KINDS:
                return _Unknown()
            for call in members or ():
                self._answer(call, LineError.of(exc))
            return None

    async def _nap(self, seconds: float) -> None:
        """Sleep ``seconds``, or less when a caller stops waiting or the batch's deadline comes."""
        deadline, now = self.deadline.deadline(), time.monotonic()
        if deadline is not None and deadline.at > now:
            seconds = min(seconds, deadline.at - now)
        seconds = max(seconds, 0.0)
        self._gone.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._gone.wait(), seconds)

    def _before_deadline(self, members: list[_Call] | None) -> bool:
        deadline = self.deadline.deadline()
        return deadline is None or time.monotonic() < deadline.at

    # --- collecting --------------------------------------------------------------------

    async def _collect(self, batch: Any, part: BatchPart, members: list[_Call] | None, *, keep_failures: bool) -> None:
        """Keep every line of an ended batch, answer the calls waiting on it, settle the ones
        whose caller has gone (and keep their failures for the next attempt, unless this
        process cancelled the batch); then it is no longer out."""
        client = self._client(part.endpoint)
        try:
            found = await client.collected_lines(batch)
        except ModelError as exc:
            for call in members or ():
                self._answer(call, LineError.of(exc))
            return  # still out: a rerun collects it
        lines = {str(line.get("custom_id")): line for line in found}
        calls = self._calls_of(client, part)
        if not calls and members is None:  # the record of this part's calls is gone (a retry on a worker without this disk)
            for custom_id, line in lines.items():  # kept unclaimed: each for the call whose hash it is
                decoded = client.decode_call_id(custom_id, self.journal.batch_id)
                self._keep_unclaimed(custom_id if decoded is None else hashed_call_id(*decoded), client.outcome(line, batch))
            lines = {}
        unknown = sorted(set(lines) - set(calls))
        if unknown:  # not this part's calls: never kept, never billed to a row
            self._notice(f"provider batch {batch.id} answered {len(unknown)} request(s) it was not sent ({', '.join(unknown[:3])}"
                         f"{'...' if len(unknown) > 3 else ''}): ignored")  # fmt: skip
        if members is None:  # re-attached: every line, none waited on
            for custom_id, line in lines.items():
                if custom_id in calls:
                    run_id, fingerprint = calls[custom_id]
                    self._keep(run_id, fingerprint, part.model, client.outcome(line, batch), waited=False, keep_failure=keep_failures)
        for call in members or ():
            outcome = client.outcome(lines.get(call.custom_id), batch)
            answer = self._keep(call.run_id, call.fingerprint, part.model, outcome, call.waited(), keep_failure=keep_failures)
            self._answer(call, answer)
        self.state.collected(batch.id, getattr(batch, "input_file_id", None))
        self._say(f"provider batch {batch.id}: {batch.status}{_answered(batch)}, collected")

    def _keep_unclaimed(self, call_id: str, outcome: dict[str, Any] | ModelError) -> None:
        """Keep (redacted) an answer no record of this store names, under its call's hashed id, for
        that call to claim, and be recorded by, when it runs again
        (:class:`~runner.store.provider_answers.ProviderAnswers`); a failed line is not kept: its
        call is sent again."""
        if isinstance(outcome, ModelError):
            return
        body: dict[str, Any] = redact_secrets(outcome, self.secrets)
        try:
            parse_answer(body)
        except InvalidResponse:
            return
        self.answers.answered_unclaimed(call_id, body)

    def _keep(
        self, run_id: str, fingerprint: str, model: str, outcome: dict[str, Any] | ModelError, waited: bool, *, keep_failure: bool
    ) -> Answer:
        """Store an answered call's body (redacted) before anyone uses it; when its caller has
        gone, settle its reservation with what the provider billed (nothing for a failed line)
        and, with ``keep_failure``, keep the failure for its next attempt to take."""
        answer: Answer
        usage: Usage | None = None
        if isinstance(outcome, ModelError):
            answer = LineError.of(outcome)
        else:
            body: dict[str, Any] = redact_secrets(outcome, self.secrets)
            try:
                usage = parse_answer(body).usage
            except InvalidResponse as exc:
                answer = LineError("invalid_response", f"the provider batch's answer is not a chat completion: {exc}")
            else:
                self.answers.answered(run_id, fingerprint, body)
                answer = body
        if waited:
            return answer
        if isinstance(answer, LineError) and keep_failure:
            self.answers.failed(run_id, fingerprint, answer.kind, answer.message)
        ledger_id = self.answers.ledger_id(run_id, fingerprint)
        if ledger_id is not None:
            self._settle(run_id, ledger_id, model, usage, answer)
        return answer

    def _settle(self, run_id: str, ledger_id: int, model: str, usage: Usage | None, answer: Answer) -> None:
        """Settle a call of ``run_id`` whose caller has gone: the answer's usage at the batch price,
        or nothing; the row's spend is corrected from the store (:meth:`_correct_rows`)."""
        if usage is not None:
            priced = replace(usage, cost_usd=self.prices(model).cost(usage, "batch"))
            self.store.settle_model_call(ledger_id, ModelCallEntry("", "", model, 0, priced, 0.0, "ok"))
        else:
            error = answer.message if isinstance(answer, LineError) else "no answer"
            self.store.settle_model_call(ledger_id, ModelCallEntry("", "", model, 0, Usage(), 0.0, "error", error=error))
        self._settled.add(run_id)

    def _answer(self, call: _Call, answer: Answer) -> None:
        for waiter in call.waiters:
            if not waiter.done():
                waiter.set_result(answer)
                self._waits(call.run_id, -1)

    def _correct_rows(self) -> None:
        """Rows no longer running whose calls were settled late get their run's spend from the
        store (a row still running records its own when it ends)."""
        if not self._settled:
            return
        for row in self.journal.records():
            if row.run_id in self._settled and row.status != "running":
                self.journal.correct_usage(row.number, self.store.spent(row.run_id))
                self._settled.discard(row.run_id)

    # --- helpers -----------------------------------------------------------------------

    def _client(self, key: str) -> BatchClient:
        if key not in self._clients:
            endpoint = self.endpoints.get(key)
            if endpoint is None:
                raise ModelError("config", f"a provider batch at {key} is recorded, but no agent of this task calls that endpoint now")
            self._clients[key] = batch_client(endpoint)
        return self._clients[key]

    def _say(self, text: str) -> None:
        """Progress (rounds out, batches found and collected): shown unless ``--progress none``."""
        if self.log is not None:
            print(text, file=self.log, flush=True)

    def _notice(self, text: str) -> None:
        """What changed at the provider, or needs the user (files deleted or not, a batch
        cancelled or left running): shown whatever ``--progress`` says."""
        if self.notices is not None:
            with contextlib.suppress(ValueError, OSError):  # a closed or broken stderr must not fail the rows
                print(text, file=self.notices, flush=True)


@dataclass(frozen=True)
class _Unknown:
    """A status that could not be read this time (a transient failure): look again later."""

    status: str = "unknown"
    request_counts: None = None


def _answered(batch: Any) -> str:
    counts = getattr(batch, "request_counts", None)
    return f" ({counts.completed} answered, {counts.failed} not, of {counts.total})" if counts is not None else ""
