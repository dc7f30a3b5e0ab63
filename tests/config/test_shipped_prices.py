"""The shipped price list is parsed once per process; every caller gets its own dict."""

from __future__ import annotations

from runner.config.prices import cost_usd, default_prices


def test_each_caller_gets_its_own_prices() -> None:
    first = default_prices()
    first["gpt-4o-mini"] = first["gpt-4o"]
    first["made-up"] = first["gpt-4o"]
    second = default_prices()
    assert "made-up" not in second and second["gpt-4o-mini"] != second["gpt-4o"]
    assert second == default_prices()


def test_cached_input_tokens_cost_the_cached_rate() -> None:
    price = default_prices()["gpt-4o-mini"]
    assert price.cached_input_per_mtok == 0.075
    full = cost_usd(price, 1_000_000, 0)
    half_cached = cost_usd(price, 1_000_000, 0, cached_input_tokens=500_000)
    assert full == 0.15 and half_cached == (500_000 * 0.15 + 500_000 * 0.075) / 1_000_000
    unpriced_cache = default_prices()["qwen-plus"]  # no cached rate known: billed as uncached
    assert cost_usd(unpriced_cache, 1000, 0, 1000) == cost_usd(unpriced_cache, 1000, 0)
