"""The live engine's side of provider batch rounds: a model whose calls go into the next
round, and the row executor that registers each row with the rounds.

:class:`BatchRoundModel` is the :class:`~runner.model.base.ChatModel` the model pool hands
the agents of a ``--via batch-api`` batch (:class:`RoundTransport`). The loop reserves each
call at batch prices and writes it to the call ledger before it comes here, exactly as for a
live call; the call then waits for its round's answer. A line the provider answered becomes
the response (billed at the batch price); a line it did not answer raises the
:class:`~runner.errors.ModelError` a live call would (same kinds: ``server_error``,
``rate_limited``, ``bad_request``..., plus ``batch_expired``, ``batch_cancelled``,
``batch_failed``), so the loop and the engine handle it as they handle a live failure. With
``--batch-fallback live`` such a call is sent live at once instead, through the normal HTTP
client, reserved again at the live price (unless the live call would be refused too).
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

from runner.batch.executor import RowDeferred, RowExecutor
from runner.batch.provider_api import NOT_FOR_LIVE
from runner.batch.rounds import CURRENT_RUN, LineError, RoundCollector
from runner.core.results import RunResult
from runner.model.answers import parse_answer
from runner.model.base import AttemptHook, ChatModel, ModelRequest, ModelResponse
from runner.model.endpoint import Endpoint
from runner.runs.options import RunOptions


class BatchRoundModel:
    """One endpoint's model, answered by provider batch rounds (see the module doc)."""

    supports_tools = True

    def __init__(self, collector: RoundCollector, endpoint: Endpoint, live: ChatModel):
        self.collector, self.endpoint, self.live = collector, endpoint, live
        self.name = endpoint.model_id

    async def complete(self, request: ModelRequest, attempts: AttemptHook | None = None) -> ModelResponse:
        answer = await self.collector.send(self.endpoint, request, attempts.ledger_id if attempts is not None else None)
        if isinstance(answer, LineError):
            if not self.collector.fallback_live or answer.kind in NOT_FOR_LIVE:
                raise answer.error()
            if attempts is not None:  # settles the unanswered line (not billed), reserves the live call
                attempts.retry(answer.kind, answer.message, tariff="live")
            return await self.live.complete(request, attempts)
        return replace(parse_answer(answer), tariff="batch")

    async def aclose(self) -> None:
        """Nothing of its own to close (the pool closes ``live``, the collector its clients)."""


class RoundTransport:
    """What the model pool asks for each endpoint's model under ``--via batch-api``."""

    def __init__(self, collector: RoundCollector):
        self.collector = collector

    def model(self, endpoint: Endpoint, live: ChatModel) -> ChatModel:
        return BatchRoundModel(self.collector, endpoint, live)


class RoundRows:
    """A :data:`~runner.batch.executor.RowExecutor` that runs each row as its own task,
    registered with the rounds while it runs; a row still running when the command returns
    with a provider batch out (not waiting) stops there and raises :class:`RowDeferred`."""

    def __init__(self, executor: RowExecutor, collector: RoundCollector):
        self.executor, self.collector = executor, collector

    async def __call__(self, inputs: dict[str, Any], options: RunOptions) -> RunResult:
        run_id = options.run_id
        assert run_id is not None  # the engine gives every row its run id
        token = CURRENT_RUN.set(run_id)
        try:
            task: asyncio.Future[RunResult] = asyncio.ensure_future(self.executor(inputs, options))  # keeps the run id
        finally:
            CURRENT_RUN.reset(token)
        self.collector.enter(run_id)
        try:
            return await self._finished(task)
        finally:
            self.collector.leave(run_id)

    async def _finished(self, task: asyncio.Future[RunResult]) -> RunResult:
        either: list[asyncio.Future[Any]] = [task, self.collector.deferral]
        try:
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            task.cancel()
            await asyncio.wait({task})
            raise
        if not task.done():
            task.cancel()
            await asyncio.wait({task})
            if task.cancelled():
                pending = ", ".join(self.collector.pending)
                raise RowDeferred(f"waiting for provider batch {pending}: run the command again to collect it and go on")
        return task.result()
