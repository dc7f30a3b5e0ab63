"""Waiting for provider batches to end, asynchronously: the loop Airflow's triggerer runs.

:func:`wait_for_batches` retrieves each batch with backoff (the :class:`PollPolicy` of
``runner batch --via batch-api``) until every one has ended, and returns one
:class:`BatchWaitEvent`:

* ``ended``: every batch reached a final provider status (completed, failed, expired,
  cancelled); the worker then collects them through the batch journal;
* ``error``: a fault no wait can cure -- ``auth`` (the key is refused), ``not_found``
  (the endpoint does not know the batch), ``bad_request``, ``no_key`` (the triggerer
  cannot find the key) -- or ``unreachable``: transient faults (connection refused,
  timeouts, 429, 5xx) for longer than ``unreachable_seconds`` without one answer.

At ``cancel_at`` (the batch's wall cap) the batches that have not ended are cancelled, and
the wait goes on until the provider says they ended; the event then names the reason.

Decisions are made on the classified fault's kind (:mod:`runner.model.openai_faults`),
never on message text, and messages are redacted. No Airflow imports here.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from runner.errors import UsageError

WaitStatus = Literal["ended", "error"]
ERROR_KINDS = ("auth", "not_found", "bad_request", "unreachable", "no_key")
"""What an ``error`` event's ``kind`` may be; only ``unreachable`` may pass on another try."""


@dataclass(frozen=True)
class BatchWaitEvent:
    """What the wait ended with; travels to the worker as a trigger event's JSON payload."""

    status: WaitStatus
    batches: Mapping[str, str] = field(default_factory=dict)  # batch id -> last provider status seen
    kind: str | None = None  # an error's kind (ERROR_KINDS)
    message: str | None = None  # an error's redacted message
    cancelled_for: str | None = None  # why the wait cancelled the batches (the wall cap), if it did

    def as_payload(self) -> dict[str, Any]:
        return {"status": self.status, "batches": dict(self.batches), "kind": self.kind, "message": self.message,
                "cancelled_for": self.cancelled_for}  # fmt: skip

    @classmethod
    def from_payload(cls, value: Any) -> BatchWaitEvent:
        """The inverse of :meth:`as_payload`; anything else is refused (:class:`UsageError`)."""
        if not isinstance(value, Mapping) or value.get("status") not in ("ended", "error"):
            raise UsageError(f"not an event of the provider batch trigger: {value!r}")
        batches = value.get("batches") or {}
        if not isinstance(batches, Mapping):
            raise UsageError(f"not an event of the provider batch trigger: {value!r}")
        event = cls(value["status"], {str(k): str(v) for k, v in batches.items()}, _text(value.get("kind")),
                    _text(value.get("message")), _text(value.get("cancelled_for")))  # fmt: skip
        if event.status == "error" and event.kind not in ERROR_KINDS:
            raise UsageError(f"the provider batch trigger sent an error of unknown kind {event.kind!r}")
        return event

    @classmethod
    def error(cls, kind: str, message: str, batches: Mapping[str, str] | None = None) -> BatchWaitEvent:
        return cls("error", dict(batches or {}), kind, message)


@dataclass(frozen=True)
class WaitPolicy:
    """How the wait polls, how long the endpoint may fail to answer, and when to cancel."""

    first_seconds: float = 30.0
    max_seconds: float = 600.0
    unreachable_seconds: float = 1800.0
    cancel_at: float | None = None  # epoch seconds (time.time()): cancel what has not ended
    cancel_reason: str | None = None


async def wait_for_batches(client: Any, batch_ids: Sequence[str], policy: WaitPolicy) -> BatchWaitEvent:
    """Retrieve ``batch_ids`` through ``client`` (an ``openai.AsyncOpenAI``) until all have ended."""
    from runner.batch.provider_api import FINISHED, PollPolicy

    seen: dict[str, str] = {}
    waits = PollPolicy(first_seconds=policy.first_seconds, max_seconds=policy.max_seconds).waits()
    failing_since: float | None = None
    cancelled = False
    while True:
        try:
            if not cancelled and policy.cancel_at is not None and time.time() >= policy.cancel_at:
                await _cancel(client, [b for b in batch_ids if seen.get(b) not in FINISHED])
                cancelled = True
            for batch_id in batch_ids:
                if seen.get(batch_id) not in FINISHED:
                    seen[batch_id] = await _status(client, batch_id)
            failing_since = None
        except _Fault as fault:
            if fault.kind != "transient":
                return BatchWaitEvent.error(fault.kind, fault.message, seen)
            failing_since = time.monotonic() if failing_since is None else failing_since
            if time.monotonic() - failing_since >= policy.unreachable_seconds:
                message = f"no answer from the endpoint for {policy.unreachable_seconds:g} s: {fault.message}"
                return BatchWaitEvent.error("unreachable", message, seen)
        if len(seen) == len(batch_ids) and all(status in FINISHED for status in seen.values()):
            return BatchWaitEvent("ended", seen, cancelled_for=policy.cancel_reason if cancelled else None)
        await asyncio.sleep(_next_wait(waits, None if cancelled else policy.cancel_at))


async def cancel_batches(client: Any, batch_ids: Sequence[str]) -> list[str]:
    """Ask the provider to cancel each of ``batch_ids`` once (one that already ended refuses,
    which is fine); what could not be asked, as redacted messages (empty: every request went out)."""
    problems = []
    for batch_id in batch_ids:
        try:
            await _cancel(client, [batch_id])
        except _Fault as fault:
            problems.append(f"provider batch {batch_id} could not be cancelled: {fault.message}")
    return problems


def _next_wait(waits: Iterator[float], cancel_at: float | None) -> float:
    """The next backoff wait, cut short so a cancel happens on time."""
    wait = next(waits)
    return wait if cancel_at is None else max(0.0, min(wait, cancel_at - time.time()))


class _Fault(Exception):
    """A classified endpoint fault: ``transient`` (wait and retry) or an :data:`ERROR_KINDS` kind."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind, self.message = kind, message


async def _status(client: Any, batch_id: str) -> str:
    batch = await _call(client, client.batches.retrieve(batch_id), batch_id)
    return str(batch.status)


async def _cancel(client: Any, batch_ids: Sequence[str]) -> None:
    """Ask the provider to cancel each batch; a refusal (it just ended) is left to the next retrieve."""
    for batch_id in batch_ids:
        try:
            await _call(client, client.batches.cancel(batch_id), batch_id)
        except _Fault as fault:
            if fault.kind in ("transient", "auth"):
                raise


async def _call(client: Any, pending: Any, batch_id: str) -> Any:
    """Await one Batches call; an endpoint failure becomes a :class:`_Fault` (redacted message)."""
    from runner.model.faults import RETRYABLE_KINDS
    from runner.model.openai_faults import ENDPOINT_EXCEPTIONS, classify

    try:
        return await pending
    except ENDPOINT_EXCEPTIONS as exc:
        fault = classify(exc, (client.api_key,))
    if fault.kind in RETRYABLE_KINDS:
        raise _Fault("transient", fault.message)
    if fault.kind == "not_found":
        raise _Fault("not_found", f"provider batch {batch_id} is not known to {_where(client)}: {fault.message}")
    if fault.kind == "auth":
        raise _Fault("auth", f"{_where(client)} refused the API key: {fault.message}")
    raise _Fault("bad_request", f"{_where(client)} refused a request about provider batch {batch_id}: {fault.message}")


def _where(client: Any) -> str:
    from runner.endpoints import safe_url

    return safe_url(str(client.base_url))


def _text(value: Any) -> str | None:
    return None if value is None else str(value)
