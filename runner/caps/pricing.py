"""Turning tokens into USD for one model, and the worst case of a call before it is sent."""

from __future__ import annotations

from dataclasses import dataclass, field

from runner.caps.budget import Budget, Estimate
from runner.config.prices import batch_price, cost_usd, tier_price
from runner.config.profiles import DEFAULT_PROFILE, ModelProfile, TierBilling
from runner.config.specs import Price
from runner.model.base import ModelRequest, Tariff, Usage
from runner.model.tokens import UTF8_BYTES_BOUND, estimate_prompt_tokens
from runner.model.wire import request_body


@dataclass(frozen=True)
class Pricer:
    """Prices one model. ``price`` is its live price, ``None`` for a model with no known price:
    its calls are recorded as unpriced (0 USD), which is only allowed without a money cap.
    ``tariff`` is how its calls are sent, so what they reserve: live, or through the
    provider's Batch API (``--via batch-api``) at the batch price. A live call asks for
    service tier ``tier`` (``model.service_tier``); ``profile`` says how each tier bills: the
    call reserves at the dearest tier that may serve it and is billed at the one that did
    (:meth:`~runner.config.profiles.ModelProfile.served_billing`)."""

    model_id: str
    price: Price | None
    tariff: Tariff = "live"
    tier: str | None = None
    profile: ModelProfile = field(default_factory=lambda: ModelProfile(DEFAULT_PROFILE))  # no tiers: standard rates

    @property
    def priced(self) -> bool:
        """Whether this pricer's calls have a price: at its tariff and tier, and at the dearest tier
        that may serve them, which is what a call reserves (:meth:`reprice`)."""
        return self.rates(self.tariff) is not None and self.rates(self.tariff, self.profile.reserved_billing(self.tier)) is not None

    def estimate(self, request: ModelRequest, max_output_tokens: int, *, exact: bool = True) -> Estimate:
        """The worst case of ``request``: its prompt tokens, never fewer than the endpoint
        bills (:mod:`runner.model.tokens`), plus the full completion budget, at this
        model's price. ``exact=False`` skips loading a tokenizer and counts the prompt by
        the byte bound (higher, still safe), for when no cap or rate limit needs it tight."""
        prompt = estimate_prompt_tokens(request) if exact else UTF8_BYTES_BOUND.prompt_tokens(request_body(request))
        return self.reprice(Estimate(prompt, max_output_tokens, 0.0), self.tariff)

    def cost(self, usage: Usage, tariff: Tariff | None = None, served: str | None = None) -> float:
        """USD for ``usage`` billed at ``tariff`` (default: this pricer's); a live call at the
        service tier ``served`` that its answer names (``None``: none named, billed as asked)."""
        billing = self.profile.served_billing(self.tier, served)
        rates = self.rates(tariff or self.tariff, billing) or self.rates(tariff or self.tariff)  # no rates for the tier served: as asked
        if rates is None:
            return 0.0
        return cost_usd(rates, usage.input_tokens, usage.output_tokens, usage.cached_input_tokens, usage.cache_write_tokens)

    def rates(self, tariff: Tariff, billing: TierBilling | None = None) -> Price | None:
        """The price per million tokens at ``tariff``: a live call at ``billing`` (default: as its
        tier asks; :func:`~runner.config.prices.tier_price`), a provider batch's line at the batch
        price; ``None`` when unknown."""
        if self.price is None:
            return None
        if tariff != "live":
            return batch_price(self.price)
        return tier_price(self.price, billing or self.profile.tier_billing(self.tier))

    def reprice(self, estimate: Estimate, tariff: Tariff) -> Estimate:
        """The worst case of ``estimate``'s tokens billed at ``tariff``: a live call at the dearest
        tier that may serve it (:meth:`~runner.config.profiles.ModelProfile.reserved_billing`), every
        prompt token at the dearer of the input and cache-write rates (a call may write its prefix)."""
        rates = self.rates(tariff, self.profile.reserved_billing(self.tier))
        if rates is None:
            return Estimate(estimate.input_tokens, estimate.output_tokens, 0.0)
        written = estimate.input_tokens if (rates.cache_write_per_mtok or 0) > rates.input_per_mtok else 0
        worst = cost_usd(rates, estimate.input_tokens, estimate.output_tokens, 0, written)
        return Estimate(estimate.input_tokens, estimate.output_tokens, worst)


TOKEN_AND_MONEY_CAPS = ("max_input_tokens", "max_tokens", "max_cost_usd")


def needs_exact_prompt(budget: Budget, rate_limited: bool) -> bool:
    """Whether a prompt estimate should be tight: a token rate limit applies, or some
    enclosing scope caps prompt tokens, total tokens or money. Otherwise the estimate only
    holds a reservation nothing checks, and loading a tokenizer would be wasted start-up time."""
    return rate_limited or any(
        getattr(scope.caps, name) is not None for scope in budget.chain() for name in TOKEN_AND_MONEY_CAPS
    )
