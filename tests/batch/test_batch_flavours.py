"""How a round is split, at the providers' real limits, from the shipped model profiles:
120,000 one-call rows make three provider batches at OpenAI's limits (50,000 requests) and
two at Anthropic's (100,000); a larger request is split by bytes (200 MB / 256 MB)."""

from __future__ import annotations

from runner.batch.batch_flavours import batch_target, split, split_limits
from runner.config.profiles import find_profile, shipped_profiles
from runner.config.specs import BatchApiLimits
from runner.core.providers import Provider
from runner.model.endpoint import Endpoint

ROWS = 120_000


def _limits(provider: Provider, model: str, asked: BatchApiLimits | None = None) -> tuple[int, int]:
    target = batch_target(Endpoint(provider, model, "https://example.test"), find_profile(shipped_profiles(), model))
    assert target is not None
    return split_limits(target.api, asked)


def test_120000_rows_make_three_openai_batches_and_two_anthropic_ones() -> None:
    openai = split([200] * ROWS, *_limits(Provider.OPENAI, "gpt-4o-mini"))
    anthropic = split([200] * ROWS, *_limits(Provider.ANTHROPIC, "claude-haiku-4-5"))
    assert [len(p) for p in openai] == [50_000, 50_000, 20_000]
    assert [len(p) for p in anthropic] == [100_000, 20_000]
    assert [i for p in anthropic for i in p] == list(range(ROWS))  # every row once, in order


def test_bytes_split_a_round_of_large_requests_at_each_providers_size_limit() -> None:
    sizes = [3_000] * ROWS  # 360 MB of requests
    assert [len(p) for p in split(sizes, *_limits(Provider.OPENAI, "gpt-4o-mini"))] == [50_000, 50_000, 20_000]
    anthropic = split(sizes, *_limits(Provider.ANTHROPIC, "claude-haiku-4-5"))
    assert [len(p) for p in anthropic] == [85_333, 34_667]  # 256,000,000 // 3,000 per batch


def test_a_task_or_flag_may_only_lower_the_profiles_limits() -> None:
    assert _limits(Provider.ANTHROPIC, "claude-haiku-4-5", BatchApiLimits(max_requests=2)) == (2, 256_000_000)
    assert _limits(Provider.OPENAI, "gpt-4o-mini", BatchApiLimits(max_requests=100_000)) == (50_000, 200_000_000)


def test_a_claude_id_behind_an_openai_compatible_endpoint_batches_the_openai_way() -> None:
    assert _limits(Provider.OPENAI, "claude-haiku-4-5") == (50_000, 200_000_000)


def test_no_batch_api_for_the_local_model_nor_for_azure_yet() -> None:
    profile = find_profile(shipped_profiles(), "gpt-4o-mini")
    assert batch_target(Endpoint(Provider.LOCAL, "smollm2-135m"), profile) is None
    assert batch_target(Endpoint(Provider.AZURE, "gpt-4o-mini", "https://x.openai.azure.com"), profile) is None
