"""Embeddings requests through the caps: each reserved at its worst case before it is sent,
settled with the usage the endpoint reported, and recorded as a model call.

The worst case is the texts' input tokens counted never below what the endpoint bills
(:func:`runner.model.tokens.estimate_text_tokens`, the byte bound for an unknown model), at
the embedding model's price. The reservation is the agent loop's :class:`CallLedger`, so the
budget scopes and the run store see embeddings as they see chat calls; they are not steps,
so they do not count toward ``max_steps``.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from runner.agent.ledger import CallLedger, CallRecorder
from runner.caps.budget import Budget, Estimate
from runner.caps.pricing import Pricer
from runner.config.prices import find_price
from runner.config.specs import Price
from runner.core.calls import ModelCallEntry
from runner.core.usage import Usage
from runner.model.tokens import estimate_text_tokens

EMBEDDINGS_STEP = "(embeddings)"
"""The ``step_id`` of embeddings calls made outside any step (building a knowledge base)."""


class LedgerEmbeddingMeter:
    """Meters one knowledge base's embeddings requests (``agent`` names it in the records)."""

    def __init__(self, budget: Budget, recorder: CallRecorder, pricer: Pricer, agent: str, step_id: str = EMBEDDINGS_STEP):
        self.budget, self.recorder, self.pricer, self.agent, self.step_id = budget, recorder, pricer, agent, step_id
        self._seq = itertools.count(1)

    def open(self, model: str, texts: Sequence[str]) -> _MeteredCall:
        """Reserve the request's worst case (or raise ``CapReached``) and write it down."""
        tokens = sum(estimate_text_tokens(text, model) for text in texts)
        estimate = Estimate(tokens, 0, self.pricer.cost(Usage(tokens, 0, 0)))
        template = ModelCallEntry(self.step_id, self.agent, model, next(self._seq), Usage(), 0.0, "reserved")
        ledger = CallLedger(self.budget, estimate, self.recorder, template, count_step=False)
        ledger.open()
        return _MeteredCall(ledger, self.pricer, tokens)


@dataclass
class _MeteredCall:
    ledger: CallLedger
    pricer: Pricer
    worst_tokens: int

    def answered(self, input_tokens: int | None, latency: float) -> None:
        tokens = self.worst_tokens if input_tokens is None else input_tokens  # unreported: its worst case
        usage = Usage(tokens, 0, 0, self.pricer.cost(Usage(tokens, 0, 0)))
        self.ledger.answered(usage, latency, tool_calls=0, content=None)

    def failed(self, kind: str, message: str) -> None:
        self.ledger.failed(kind, message)


class SpendTally:
    """A :class:`CallRecorder` that only adds up what settled calls used: for spend outside
    any run (``runner index``), which has no run store to write to."""

    def __init__(self) -> None:
        self.usage = Usage()
        self.calls = 0  # settled calls (embeddings are not steps: Usage.model_calls stays 0)
        self._ids = itertools.count(1)

    def call_reserved(self, call: ModelCallEntry) -> int:
        return next(self._ids)

    def model_call(self, call: ModelCallEntry, ledger_id: int | None = None) -> None:
        if call.status != "reserved":
            self.usage += call.usage
            self.calls += 1


def embedding_pricer(prices: dict[str, Price], model: str) -> Pricer:
    """The pricer of embedding model ``model`` (unpriced, 0 USD, when ``prices`` lack it)."""
    return Pricer(model, find_price(prices, model))
