"""Turning tokens into USD for one model, and the worst case of a call before it is sent."""

from __future__ import annotations

from dataclasses import dataclass

from runner.caps.budget import Estimate
from runner.config.prices import cost_usd
from runner.config.specs import Price
from runner.model.base import ModelRequest, Usage
from runner.model.tokens import estimate_prompt_tokens


@dataclass(frozen=True)
class Pricer:
    """Prices one model. ``price`` is ``None`` for a model with no known price: its calls
    are recorded as unpriced (0 USD), which is only allowed without a money cap."""

    model_id: str
    price: Price | None

    @property
    def priced(self) -> bool:
        return self.price is not None

    def estimate(self, request: ModelRequest, max_output_tokens: int) -> Estimate:
        """The worst case of ``request``: an estimate of the prompt (erring high) plus the
        full completion budget, at this model's price."""
        prompt = estimate_prompt_tokens(request)
        worst = self.cost(Usage(prompt, max_output_tokens, 0))
        return Estimate(prompt, max_output_tokens, worst)

    def cost(self, usage: Usage) -> float:
        if self.price is None:
            return 0.0
        return cost_usd(self.price, usage.input_tokens, usage.output_tokens, usage.cached_input_tokens)
