"""A provider batch's results hold an answer per request: their download is not held to a live
answer's 16 MiB cap (a Message Batch of 100,000 triage rows returns about 60 MB; the 120,000-row
run of bench/provider_batch_split.py failed every row of its first batch on it), and still has one."""

from __future__ import annotations

import asyncio

import pytest

from runner.batch.message_batches import MessageBatchesClient
from runner.core.providers import Provider
from runner.errors import ModelError
from runner.model.anthropic_server import AnthropicServer
from runner.model.base import Message, ModelRequest
from runner.model.batch_endpoints import BatchBehaviour
from runner.model.endpoint import Endpoint
from runner.model.response_cap import MAX_RESPONSE_BYTES

KEY = "sk-ant-test-results"
REQUESTS = 18
LONG = "word " * 200_000  # about 1 MB an answer: the results pass 16 MiB


async def _collect(server: AnthropicServer) -> list[dict[str, object]]:
    client = MessageBatchesClient(Endpoint(Provider.ANTHROPIC, "claude-haiku-4-5", server.base_url, KEY))
    try:
        request = ModelRequest("claude-haiku-4-5", (Message("user", "Write at length."),), max_tokens=300_000)
        content = b"".join(client.line(f"c{i}", request, "claude-haiku-4-5") for i in range(REQUESTS))
        batch_id = await client.submit(content, None, {}, "b", lambda _: None)  # type: ignore[arg-type]
        while (await client.retrieve(batch_id)).status == "in_progress":
            await asyncio.sleep(0.01)
        return await client.results(batch_id)
    finally:
        await client.close()


def test_a_message_batchs_results_larger_than_a_live_answers_cap_are_collected_whole() -> None:
    with AnthropicServer({"fallback": {"content": LONG}}, api_key=KEY, batch=BatchBehaviour(polls=1)) as server:
        lines = asyncio.run(_collect(server))
    assert sorted(str(line["custom_id"]) for line in lines) == sorted(f"c{i}" for i in range(REQUESTS))
    assert all(line["result"]["type"] == "succeeded" for line in lines)  # type: ignore[index]
    assert REQUESTS * len(LONG) > MAX_RESPONSE_BYTES  # what a live answer's cap would have refused


def test_results_past_the_batch_cap_are_refused_not_read_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("runner.batch.message_batches.MAX_BATCH_RESULTS_BYTES", 8 << 20)  # the same results, a lower cap
    server = AnthropicServer({"fallback": {"content": LONG}}, api_key=KEY, batch=BatchBehaviour(polls=1))
    with server, pytest.raises(ModelError, match="larger than 8 MiB; no provider batch's results are that large"):
        asyncio.run(_collect(server))
