"""Records what a run does: into the run store, and as events for the CLI or a log.

Every value passes through :func:`~runner.redact.redact_secrets` first, so an API key that reached a message by
accident never reaches the store, the event stream or a report; the transcript redacts what it
stores as it serialises it (:class:`~runner.store.transcripts.RunTranscript`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from runner.core.budget_warnings import BudgetWarning
from runner.core.calls import Exchange, ModelCallEntry, ToolCallEntry
from runner.core.ports import EventSink
from runner.core.steps import ToolCallSummary
from runner.redact import redact_secrets
from runner.store.runstore import RunStore, now_iso
from runner.store.transcripts import SentRequest


class RunRecorder:
    """The loop's :class:`~runner.agent.loop.Recorder` for one run attempt."""

    def __init__(self, store: RunStore, run_id: str, attempt: int, sink: EventSink | None, secrets: Sequence[str]):
        self.store, self.run_id, self.attempt = store, run_id, attempt
        self.sink, self.secrets = sink, tuple(s for s in secrets if s)
        self.transcript = store.transcripts.for_run(run_id, attempt, self.secrets)
        self.tool_calls_by_step: dict[str, list[ToolCallSummary]] = defaultdict(list)
        self._sent: dict[int, SentRequest] = {}  # the transcript requests of the calls in flight, by ledger id

    def emit(self, event: str, **fields: Any) -> None:
        if self.sink is not None:
            self.sink(redact_secrets({"event": event, "run_id": self.run_id, "at": now_iso(), **fields}, self.secrets))

    def budget_warning(self, warning: BudgetWarning) -> None:
        """A ``warn_at`` share a call of this run took a budget window past: kept in the run
        store (``runner stats``, its deliveries) and emitted as a ``budget_warning`` event."""
        self.store.budget_warnings.add(self.run_id, self.attempt, warning)
        self.emit("budget_warning", **warning.as_dict())

    def call_reserved(self, call: ModelCallEntry) -> int:
        """Write a call's worst case before it is sent, with its request in the transcript
        (durable: a ``kill -9`` mid-call leaves both; settling the call replaces the entry)."""
        ledger_id = self.store.add_model_call(self.run_id, self.attempt, call)
        if call.exchange is not None:
            self._sent[ledger_id] = self.transcript.add_model_call(ledger_id, call, call.exchange)
        return ledger_id

    def model_call(self, call: ModelCallEntry, ledger_id: int | None = None) -> None:
        call = replace(call, error=redact_secrets(call.error, self.secrets), content=redact_secrets(call.content, self.secrets))
        if ledger_id is None:
            ledger_id = self.store.add_model_call(self.run_id, self.attempt, call)
        else:
            self.store.settle_model_call(ledger_id, call)
        sent = self._sent.pop(ledger_id, None)
        if call.exchange is None:
            pass
        elif sent is not None:  # the request is in the transcript since the call was reserved
            ended = Exchange((), (), call.exchange.settings, call.exchange.response)
            self.transcript.settle_model_call(ledger_id, call, ended, sent)
        else:
            self.transcript.add_model_call(ledger_id, call, call.exchange)
        self.emit(
            "model_call", step_id=call.step_id, agent=call.agent, model=call.model, seq=call.seq,
            input_tokens=call.usage.input_tokens, output_tokens=call.usage.output_tokens,
            cached_input_tokens=call.usage.cached_input_tokens, reasoning_tokens=call.usage.reasoning_tokens,
            cache_write_tokens=call.usage.cache_write_tokens, cost_usd=call.usage.cost_usd,
            latency_seconds=call.latency_seconds, status=call.status, error=call.error, error_kind=call.error_kind,
            finish_reason=call.finish_reason, tool_calls=call.tool_calls, content_excerpt=(call.content or "")[:300], cached=call.cached,
        )

    def tool_call(self, call: ToolCallEntry) -> None:
        call = replace(
            call, arguments=redact_secrets(call.arguments, self.secrets),
            output_excerpt=redact_secrets(call.output_excerpt, self.secrets),
        )
        self.store.add_tool_call(self.run_id, self.attempt, call)
        output = call.output if call.output is not None else call.output_excerpt
        self.transcript.add_tool_call(call, redact_secrets(output, self.secrets))
        summary = ToolCallSummary.parsed(call.name, call.status, call.arguments, call.duration_seconds, call.output_excerpt)
        self.tool_calls_by_step[call.step_id].append(summary)
        self.emit(
            "tool_call", step_id=call.step_id, agent=call.agent, seq=call.seq, name=call.name, arguments=call.arguments,
            status=call.status, duration_seconds=call.duration_seconds, output_excerpt=call.output_excerpt,
            artifacts=list(call.artifacts), cached=call.cached,
        )
