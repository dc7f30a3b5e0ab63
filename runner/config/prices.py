"""Model prices: shipped defaults (``prices.yaml``) overridden by ``kind: Prices`` documents."""

from __future__ import annotations

from functools import cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from runner.config.specs import Price, build_prices

if TYPE_CHECKING:
    from runner.config.profiles import TierBilling

LOCAL_MODEL_ID = "smollm2-135m"


def default_prices() -> dict[str, Price]:
    """The prices shipped with the runner (a new dict; the file is parsed once per process)."""
    return dict(_shipped_prices())


@cache
def _shipped_prices() -> tuple[tuple[str, Price], ...]:
    from runner.config.yamlload import load_text  # PyYAML only when the shipped file is read

    text = resources.files("runner.config").joinpath("prices.yaml").read_text("utf-8")
    (doc,) = load_text(text, "runner/config/prices.yaml", Path("prices.yaml"))
    return tuple(build_prices(doc).items())


def find_price(prices: dict[str, Price], model_id: str) -> Price | None:
    """The price of ``model_id``: an exact match, else the longest known prefix
    (``gpt-4o-mini-2024-07-18`` is priced as ``gpt-4o-mini``), else ``None``."""
    if model_id in prices:
        return prices[model_id]
    bare = model_id.rsplit("/", 1)[-1]
    candidates = [m for m in prices if bare == m or bare.startswith(m + "-")]
    return prices[max(candidates, key=len)] if candidates else None


def cost_usd(
    price: Price, input_tokens: int, output_tokens: int, cached_input_tokens: int = 0, cache_write_tokens: int = 0
) -> float:
    """USD for one call. ``input_tokens`` counts every prompt token; of them, cached ones are
    billed at the cached rate and ones written to the cache at the cache-write rate, when
    known (else the input rate). Output tokens include reasoning tokens."""
    cached_rate = price.cached_input_per_mtok if price.cached_input_per_mtok is not None else price.input_per_mtok
    write_rate = price.cache_write_per_mtok if price.cache_write_per_mtok is not None else price.input_per_mtok
    cached = cached_input_tokens
    written = max(min(cache_write_tokens, input_tokens - cached), 0)
    uncached = max(input_tokens - cached - written, 0)
    return (
        uncached * price.input_per_mtok + cached * cached_rate + written * write_rate + output_tokens * price.output_per_mtok
    ) / 1_000_000


BATCH_DISCOUNT = 0.5
"""What a provider's Batch API charges of the live price, unless a price says otherwise."""


def batch_price(price: Price) -> Price:
    """``price`` through the provider's Batch API: its ``batch_*`` rates, else half the live
    ones (cached input at the same discount)."""
    def half(rate: float | None) -> float | None:
        return None if rate is None else rate * BATCH_DISCOUNT

    given_in, given_out = price.batch_input_per_mtok, price.batch_output_per_mtok
    return Price(
        input_per_mtok=given_in if given_in is not None else price.input_per_mtok * BATCH_DISCOUNT,
        output_per_mtok=given_out if given_out is not None else price.output_per_mtok * BATCH_DISCOUNT,
        cached_input_per_mtok=half(price.cached_input_per_mtok),
        cache_write_per_mtok=half(price.cache_write_per_mtok),
    )


def priority_price(price: Price) -> Price | None:
    """``price`` at the priority service tier: its ``priority_*`` rates (``None`` when it has
    none: the tier is unpriced, which a money cap refuses)."""
    if price.priority_input_per_mtok is None or price.priority_output_per_mtok is None:
        return None
    cached = price.priority_cached_input_per_mtok
    return Price(
        input_per_mtok=price.priority_input_per_mtok,
        output_per_mtok=price.priority_output_per_mtok,
        cached_input_per_mtok=cached if cached is not None else price.priority_input_per_mtok,
        cache_write_per_mtok=price.cache_write_per_mtok,
    )


def tier_price(price: Price | None, billing: TierBilling) -> Price | None:
    """The live price of a call at a service tier that bills as ``billing`` (a profile's
    ``service_tiers`` value): the standard price, the Batch API's (OpenAI's flex tier), or
    the priority rates; ``None`` when unknown."""
    if price is None or billing == "standard":
        return price
    return batch_price(price) if billing == "batch" else priority_price(price)


def unpriced_message(model_id: str, agent: str, billing: TierBilling = "standard") -> str:
    """Why a money cap cannot be enforced for ``model_id`` (its calls may bill at ``billing``), and how to fix it."""
    if billing == "priority":
        return (
            f"money cap set but model '{model_id}' (agent '{agent}') may be served at the priority tier and its price "
            "has no priority rates; add priority_input_per_mtok and priority_output_per_mtok to its `kind: Prices` "
            "entry, or remove max_cost_usd"
        )
    return (
        f"money cap set but model '{model_id}' (agent '{agent}') has no known price; add it to a "
        "`kind: Prices` document (USD per million tokens) or remove max_cost_usd"
    )
