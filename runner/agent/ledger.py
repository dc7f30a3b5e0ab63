"""The reservations of one model call: held in every budget scope and written to the run
store *before* each attempt is sent, settled with what the endpoint reported after.

A retried call reserves again before each retry (a timed-out or dropped attempt may have
been billed, so it is settled at its worst case); a call cancelled in flight (a wall-clock
deadline, Ctrl-C) is settled at its worst case too, since the endpoint may finish and bill
it. A crash leaves the durable row ``reserved``; the next attempt of the run counts it at its
worst case (:meth:`runner.store.runstore.RunStore.start_run`).

How an attempt ended is written to the run store *before* its reservation is settled: a crash
in between leaves the actual usage on record, and a shared cap ledger entry the dead worker
still holds is then settled to it when the run resumes (the row names its reservation),
instead of counting the worst case.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any, Protocol

from runner.caps.budget import Budget, Estimate, Reservation
from runner.core.calls import ModelCallEntry, ModelCallStatus
from runner.core.spender import Spender
from runner.core.usage import Usage
from runner.model.base import Tariff
from runner.store.group_commit import commit_now, durable

BILLABLE_FAULTS = frozenset({"timeout", "connection", "invalid_response"})
"""Failed attempts the endpoint may still have processed (and billed)."""
LIVE_BILLABLE_FAULTS = BILLABLE_FAULTS | {"server_error"}
"""The same for a live call, where a 5xx may come after the completion was billed (a gateway
answers 500/502/504 while its upstream finishes); a provider batch line's error is not billed."""


class CallRecorder(Protocol):
    """Where model calls are written: durably before they are sent, then settled."""

    def call_reserved(self, call: ModelCallEntry) -> int:
        """Write ``call`` (status ``reserved``, its worst case as usage); return its ledger id."""

    def model_call(self, call: ModelCallEntry, ledger_id: int | None = None) -> None:
        """Settle the reserved call ``ledger_id`` (or record a new one) with how it ended."""


class CallLedger:
    """One model call's attempts: each reserved before it is sent, each settled once."""

    def __init__(
        self, budget: Budget, estimate: Estimate, recorder: CallRecorder, template: ModelCallEntry, *, count_step: bool = True,
        reprice: Callable[[Estimate, Tariff], Estimate] | None = None,
    ):
        self.budget, self.estimate, self.recorder, self.template = budget, estimate, recorder, template
        self.count_step = count_step  # False: not a step of an agent (an embeddings request), not counted in max_steps
        self.reprice = reprice  # the worst case at another tariff (a provider batch's call retried live)
        self.worst = Usage(estimate.input_tokens, estimate.output_tokens, 0, estimate.cost_usd)
        self.attempts = 0
        self._held: Reservation | None = None
        self._ledger_id: int | None = None

    @property
    def ledger_id(self) -> int | None:
        """The run store's record of the attempt in flight (``None`` before the first is opened)."""
        return self._ledger_id

    def open(self) -> None:
        """Reserve the next attempt in every scope (or raise ``CapReached``), write it down, and
        commit that at once (in a batch's group commit, with whatever else the group holds)."""
        self._open()
        commit_now()

    async def open_in_group(self) -> None:
        """:meth:`open` for a caller that can wait: the reservation commits with the writes of the
        batch's other rows (:mod:`runner.store.group_commit`); this returns once it has, and only
        then may the request be sent."""
        self._open()
        try:
            await durable()
        except BaseException:  # cancelled (or the commit failed) before the request was sent: nothing to bill
            self.failed("cancelled", "stopped before the request was sent", billable=frozenset())
            raise

    def _open(self) -> None:
        caller = Spender(agent=self.template.agent, model=self.template.model)  # who spent, in a shared scope's entry
        self._held = self.budget.reserve(self.estimate, count_step=self.count_step, caller=caller)
        self.attempts += 1
        try:
            self._ledger_id = self.recorder.call_reserved(self._entry(self.worst, "reserved"))
        except BaseException:  # not written down (a closed store, a failed commit group): never sent, so not held
            held, self._held, self._ledger_id = self._held, None, None
            held.release()
            raise

    def retry(self, kind: str, message: str, tariff: Tariff | None = None) -> None:
        """The endpoint failed this attempt with ``kind`` and the client will retry: settle it,
        then reserve the retry (a cap reached here stops the retries). With ``tariff`` the
        retry is billed at that price, and reserved at it."""
        self.failed(kind, message, billable=BILLABLE_FAULTS if tariff is not None else LIVE_BILLABLE_FAULTS, retried=True)
        if tariff is not None:
            self.template = replace(self.template, tariff=tariff)
        if tariff is not None and self.reprice is not None:
            self.estimate = self.reprice(self.estimate, tariff)
            self.worst = Usage(self.estimate.input_tokens, self.estimate.output_tokens, 0, self.estimate.cost_usd)
        self.open()

    def answered(
        self, usage: Usage, latency: float, *, tool_calls: int, content: str | None, finish_reason: str | None = None,
        reply: dict[str, Any] | None = None,
    ) -> None:
        """The attempt succeeded with ``usage`` (priced); ``reply`` is the response for the transcript."""
        assert self._held is not None
        exchange = self.template.exchange
        call = replace(
            self._entry(usage, "ok"), latency_seconds=latency, tool_calls=tool_calls, content=content,
            finish_reason=finish_reason, exchange=replace(exchange, response=reply) if exchange and reply else exchange,
        )
        try:
            self.recorder.model_call(call, self._ledger_id)
        finally:  # settled even when the record failed: the call was made
            self._held.settle(usage)
            self._held = None

    def failed(
        self, kind: str, message: str, *, billable: frozenset[str] = LIVE_BILLABLE_FAULTS, retried: bool = False
    ) -> None:
        """The attempt failed: counted at its worst case when it may have been billed (its
        ``kind`` is in ``billable``); ``retried``: the client tries again, and only that retry
        counts as the step (max_steps counts steps, not attempts)."""
        if self._held is None:
            return
        billed = kind in billable
        failed = replace(self._entry(self.worst if billed else Usage(), "error"), error=message, error_kind=kind)
        try:
            self.recorder.model_call(failed, self._ledger_id)
        finally:
            if billed:
                self._held.settle(self.worst, step=not retried)
            else:
                self._held.release()
            self._held = None

    def abandoned(self, reason: str) -> None:
        """The attempt was cancelled in flight: the endpoint may still bill it."""
        self.failed("timeout", reason)

    def _entry(self, usage: Usage, status: ModelCallStatus) -> ModelCallEntry:
        reservation = self._held.id if self._held is not None else None
        return replace(self.template, seq=self.template.seq + self.attempts - 1, usage=usage, status=status, reservation=reservation)
