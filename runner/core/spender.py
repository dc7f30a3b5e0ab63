"""Who spent: the task, agent and model a model call's spend counts for.

A reservation in the shared cap ledger records its :class:`Spender` with its entry, in the
transaction that holds it (:mod:`runner.store.cap_ledger`), so what a scope spent can be
broken down by task, agent and model from the ledger alone (``runner budgets``), whichever
worker settled or took over the call. The task comes from the run that owns the reservation
(:class:`~runner.caps.budget.Owner`), the agent and model from the call itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Spender:
    """A call's task, agent (a judge or a knowledge base's embedder is its own agent) and
    model; ``None`` where it is not known (an entry from before spenders were recorded, a
    reservation outside a run)."""

    task: str | None = None
    agent: str | None = None
    model: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"task": self.task, "agent": self.agent, "model": self.model}
