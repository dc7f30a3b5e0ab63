"""Turning tokens into USD for one model, and the worst case of a call before it is sent."""

from __future__ import annotations

from dataclasses import dataclass

from runner.caps.budget import Budget, Estimate
from runner.config.prices import batch_price, cost_usd, tier_price
from runner.config.profiles import TierBilling
from runner.config.specs import Price
from runner.model.base import ModelRequest, Tariff, Usage
from runner.model.tokens import UTF8_BYTES_BOUND, estimate_prompt_tokens
from runner.model.wire import request_body


@dataclass(frozen=True)
class Pricer:
    """Prices one model. ``price`` is its live price, ``None`` for a model with no known price:
    its calls are recorded as unpriced (0 USD), which is only allowed without a money cap.
    ``tariff`` is how its calls are sent, so what they reserve: live, or through the
    provider's Batch API (``--via batch-api``) at the batch price."""

    model_id: str
    price: Price | None
    tariff: Tariff = "live"
    tier: TierBilling = "standard"  # how a live call bills at the agent's service tier (flex: batch rates)

    @property
    def priced(self) -> bool:
        """Whether this pricer's calls have a price (at its tariff and tier)."""
        return self.rates(self.tariff) is not None

    def estimate(self, request: ModelRequest, max_output_tokens: int, *, exact: bool = True) -> Estimate:
        """The worst case of ``request``: its prompt tokens, never fewer than the endpoint
        bills (:mod:`runner.model.tokens`), plus the full completion budget, at this
        model's price. ``exact=False`` skips loading a tokenizer and counts the prompt by
        the byte bound (higher, still safe), for when no cap or rate limit needs it tight."""
        prompt = estimate_prompt_tokens(request) if exact else UTF8_BYTES_BOUND.prompt_tokens(request_body(request))
        worst = self.cost(Usage(prompt, max_output_tokens, 0))
        return Estimate(prompt, max_output_tokens, worst)

    def cost(self, usage: Usage, tariff: Tariff | None = None) -> float:
        """USD for ``usage`` billed at ``tariff`` (default: this pricer's)."""
        rates = self.rates(tariff or self.tariff)
        if rates is None:
            return 0.0
        return cost_usd(rates, usage.input_tokens, usage.output_tokens, usage.cached_input_tokens, usage.cache_write_tokens)

    def rates(self, tariff: Tariff) -> Price | None:
        """The price per million tokens at ``tariff``: a live call at this pricer's service
        tier (:func:`~runner.config.prices.tier_price`), a provider batch's line at the batch price."""
        if self.price is None:
            return None
        return tier_price(self.price, self.tier) if tariff == "live" else batch_price(self.price)

    def reprice(self, estimate: Estimate, tariff: Tariff) -> Estimate:
        """The same worst case billed at ``tariff`` (a provider batch's call sent live instead)."""
        return Estimate(estimate.input_tokens, estimate.output_tokens, self.cost(Usage(estimate.input_tokens, estimate.output_tokens), tariff))


TOKEN_AND_MONEY_CAPS = ("max_input_tokens", "max_tokens", "max_cost_usd")


def needs_exact_prompt(budget: Budget, rate_limited: bool) -> bool:
    """Whether a prompt estimate should be tight: a token rate limit applies, or some
    enclosing scope caps prompt tokens, total tokens or money. Otherwise the estimate only
    holds a reservation nothing checks, and loading a tokenizer would be wasted start-up time."""
    return rate_limited or any(
        getattr(scope.caps, name) is not None for scope in budget.chain() for name in TOKEN_AND_MONEY_CAPS
    )
