"""The pieces of provider batch mode: batch prices and tariffs, polling, how a line becomes an
answer or a live call's error, and the loopback server's batch list with its metadata."""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest

from runner.batch.provider_api import PollPolicy, ProviderClient, line_outcome
from runner.caps.budget import Estimate
from runner.caps.pricing import Pricer
from runner.config.prices import batch_price
from runner.config.specs import Price
from runner.errors import ModelError
from runner.model.batch_endpoints import BatchBehaviour
from runner.model.endpoint import Endpoint
from runner.model.server import ScriptedServer

BATCH = SimpleNamespace(id="batch_1", status="completed", errors=None)


def test_batch_price_is_half_the_live_price_unless_given() -> None:
    live = Price(0.15, 0.60, 0.075)
    assert batch_price(live) == Price(0.075, 0.30, 0.0375)
    assert batch_price(replace(live, batch_input_per_mtok=0.1, batch_output_per_mtok=0.2)) == Price(0.1, 0.2, 0.0375)
    assert batch_price(Price(1.0, 2.0)).cached_input_per_mtok is None


def test_a_batch_pricer_reserves_and_costs_at_the_batch_price_and_reprices_live() -> None:
    from runner.model.base import Usage

    pricer = Pricer("gpt-4o-mini", Price(0.15, 0.60), "batch")
    usage = Usage(1_000_000, 1_000_000)
    assert pricer.cost(usage) == pytest.approx(0.375) and pricer.cost(usage, "live") == pytest.approx(0.75)
    worst = Estimate(1_000_000, 1_000_000, 0.375)
    assert pricer.reprice(worst, "live") == Estimate(1_000_000, 1_000_000, pytest.approx(0.75))
    assert Pricer("x", None, "batch").cost(usage) == 0.0


def test_polling_backs_off_up_to_its_maximum() -> None:
    waits = list(itertools.islice(PollPolicy(first_seconds=10, max_seconds=30, factor=2).waits(), 4))
    assert waits == [10, 20, 30, 30]
    assert list(itertools.islice(PollPolicy(first_seconds=900).waits(), 2)) == [900, 900]


def _error(outcome: Any) -> tuple[str, str]:
    assert isinstance(outcome, ModelError)
    return outcome.kind, str(outcome)


@pytest.mark.parametrize("status, kind", [(500, "server_error"), (503, "server_error"), (429, "rate_limited"),
                                          (400, "bad_request"), (401, "auth"), (404, "not_found")])  # fmt: skip
def test_a_failed_line_raises_the_kind_a_live_call_would(status: int, kind: str) -> None:
    line = {"custom_id": "a.1", "response": {"status_code": status, "body": {"error": {"message": "nope"}}}, "error": None}
    found, message = _error(line_outcome(line, BATCH))
    assert found == kind and "HTTP " + str(status) in message and "nope" in message


def test_an_answered_line_is_its_completion_body() -> None:
    body = {"choices": [{"message": {"role": "assistant", "content": "hi"}}]}
    assert line_outcome({"custom_id": "a.1", "response": {"status_code": 200, "body": body}}, BATCH) == body


@pytest.mark.parametrize("status, kind", [("expired", "batch_expired"), ("cancelled", "batch_cancelled")])
def test_a_call_without_a_line_fails_as_its_batch_ended(status: str, kind: str) -> None:
    found, message = _error(line_outcome(None, SimpleNamespace(id="batch_9", status=status, errors=None)))
    assert found == kind and "batch_9" in message


def test_an_error_line_and_a_batch_that_failed_validation_name_their_cause() -> None:
    line = {"custom_id": "a.1", "response": None, "error": {"code": "batch_expired", "message": "too late"}}
    assert _error(line_outcome(line, BATCH))[0] == "batch_expired"
    errors = SimpleNamespace(data=[SimpleNamespace(code="too_many_requests", message="over the limit")])
    found, message = _error(line_outcome(None, SimpleNamespace(id="batch_2", status="failed", errors=errors)))
    assert found == "batch_failed" and "too_many_requests: over the limit" in message


def test_a_batch_is_found_again_by_its_metadata_across_pages_of_the_list() -> None:
    async def scenario(server: ScriptedServer) -> tuple[str | None, str | None]:
        client = ProviderClient(Endpoint("openai", "gpt-4o-mini", server.base_url, "sk-test-list"))
        try:
            file_id = await client.upload("in.jsonl", b'{"custom_id": "a", "method": "POST", "url": "/v1/chat/completions", "body": {}}\n')
            wanted = {"runner_batch_id": "b1", "runner_round": "1", "runner_part": "1"}
            made = await client.create(file_id, wanted)
            for n in range(150):  # newer batches: the one wanted is on the second page
                await client.create(file_id, {"runner_batch_id": "b1", "runner_round": str(n + 2), "runner_part": "1"})
            found = await client.find(wanted, since=0)
            missing = await client.find({**wanted, "runner_round": "999"}, since=0)
            assert found == made
            return found, missing
        finally:
            await client.close()

    with ScriptedServer(batch=BatchBehaviour()) as server:
        found, missing = asyncio.run(scenario(server))
    assert found is not None and missing is None
