"""Which model each call goes to: the agent's own, or its ``fallback_model`` while a budget
with ``on_exceed: degrade`` around the call is past its threshold.

The question is asked of the ledger before every model call (:func:`degrading_budget`), so
spend by any process or worker in the same window counts, and a new window goes back to the
agent's own model. A degraded call is reserved, priced and recorded like any other, at the
fallback model's price, in every scope of the call's chain: the caps hold either way.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from runner.caps.budget import Budget
from runner.caps.pricing import Pricer
from runner.config.profiles import ModelProfile
from runner.config.specs import ModelSpec
from runner.core.degradation import Degradation
from runner.model.base import ChatModel

if TYPE_CHECKING:
    from runner.agent.loop import ModelBinding


@dataclass(frozen=True)
class FallbackRoute:
    """An agent's ``fallback_model`` as its calls reach it: the client, how its calls are
    priced, the id called, its declaration and profile, the prompt cache key and who answers."""

    model: ChatModel
    pricer: Pricer
    model_id: str
    spec: ModelSpec
    profile: ModelProfile
    prompt_cache_key: str | None = None
    endpoint_identity: str = ""


@dataclass
class ModelChoice:
    """Picks the model of each call of one agent step (``budget`` is the step's scope) and
    remembers where the step went to a fallback model (``degraded``, once per agent and budget);
    ``notice`` is told of each such switch as it happens."""

    budget: Budget
    step_id: str
    notice: Callable[[Degradation], None] | None = None
    degraded: list[Degradation] = field(default_factory=list)

    def choose(self, binding: ModelBinding, call: int) -> ModelBinding:
        """``binding``, or its fallback when it has one and a budget around the call is past its
        degrade threshold now; ``call`` is the step's number of the call about to be made."""
        if binding.fallback is None:
            return binding
        from runner.caps.budget_windows import degrading_budget  # only runs whose agents have a fallback ask

        found = degrading_budget(self.budget)
        if found is None:
            return binding
        spec, window = found
        if not any(d.agent == binding.agent and d.budget == spec.name for d in self.degraded):
            assert spec.degrade_at is not None
            switch = Degradation(
                self.step_id, binding.agent, binding.model_id, binding.fallback.model_id, spec.name, window.describe(),
                spec.degrade_at, call,
            )  # fmt: skip
            self.degraded.append(switch)
            if self.notice is not None:
                self.notice(switch)
        return binding.fallback
