"""AnthropicChatModel through the real anthropic SDK and real HTTP, against the strict
Anthropic server; every body sent is checked against the anthropic package's own types."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import pytest

from runner.errors import ModelError
from runner.model.anthropic_client import AnthropicChatModel
from runner.model.anthropic_server import AnthropicServer
from runner.model.base import Message, ModelRequest
from runner.model.faults import RetryPolicy
from tests.support.anthropic_types import check_messages_body, unknown_keys

pytestmark = pytest.mark.timeout(60)

KEY = "sk-ant-test-key-0123456789"
MODEL = "claude-haiku-4-5"
WEATHER = {
    "type": "function",
    "function": {"name": "get_weather", "description": "The weather in a city.",
                 "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}},
}  # fmt: skip
SYSTEM = "You answer questions about the weather, briefly. " * 40  # a prefix long enough to be cached
TOOL_SCRIPT = {
    "rules": [
        {"when": {"last_role": "user"}, "times": 1, "reply": {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}},
        {"when": {"last_role": "tool", "last_message": "sunny"}, "reply": {"content": "Sunny in Paris."}},
    ],
    "fallback": None,
}
NO_WAIT = RetryPolicy(max_retries=3, base_delay_seconds=0.01, max_delay_seconds=0.01, jitter=0.0)


def _request(*messages: Message, tools: tuple[dict[str, Any], ...] = (WEATHER,)) -> ModelRequest:
    return ModelRequest(MODEL, (Message("system", SYSTEM), *messages), tools=tools, max_tokens=256)


def _checked(server: AnthropicServer) -> list[dict[str, Any]]:
    bodies = [r.body for r in server.requests if r.path == "/v1/messages"]
    for body in bodies:
        check_messages_body(body)
    return bodies


async def test_a_tool_round_trip_maps_tool_use_and_tool_result_and_reads_the_cached_prefix() -> None:
    with AnthropicServer(TOOL_SCRIPT, api_key=KEY, min_cache_tokens=100) as server:
        model = AnthropicChatModel(MODEL, base_url=server.base_url, api_key=KEY)
        try:
            first = await model.complete(_request(Message("user", "Weather in Paris?")))
            (call,) = first.tool_calls
            assert (call.name, json.loads(call.arguments)) == ("get_weather", {"city": "Paris"})
            assert first.finish_reason == "tool_calls"
            answered = _request(Message("user", "Weather in Paris?"), Message("assistant", None, first.tool_calls),
                                Message("tool", "sunny, 24C", tool_call_id=call.id))  # fmt: skip
            second = await model.complete(answered)
        finally:
            await model.aclose()
        bodies = _checked(server)
    assert second.content == "Sunny in Paris." and second.finish_reason == "stop"
    first_body, second_body = bodies
    assert first_body["system"][-1]["cache_control"] == {"type": "ephemeral"}  # the static prefix is cached
    assert first_body["tools"] == [{"name": "get_weather", "description": "The weather in a city.",
                                    "input_schema": WEATHER["function"]["parameters"]}]  # fmt: skip
    assert "max_tokens" in first_body and "temperature" not in first_body
    assistant, results = second_body["messages"][1:]
    assert assistant == {"role": "assistant", "content": [{"type": "tool_use", "id": call.id, "name": "get_weather", "input": {"city": "Paris"}}]}
    assert results == {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "sunny, 24C"}]}
    # the first call wrote the prefix to the cache, the second read it: counted in input_tokens, as OpenAI's are
    assert first.usage.cached_input_tokens == 0 and second.usage.cached_input_tokens > 100
    assert second.usage.input_tokens > second.usage.cached_input_tokens


async def test_the_tier_that_served_a_call_is_read_from_its_usage() -> None:
    script = {"rules": [{"when": {"last_message": "urgent"}, "reply": {"content": "ok", "service_tier": "priority"}}], "fallback": "ok"}
    with AnthropicServer(script, api_key=KEY) as server:
        model = AnthropicChatModel(MODEL, base_url=server.base_url, api_key=KEY)
        try:
            plain = await model.complete(_request(Message("user", "hello"), tools=()))
            urgent = await model.complete(_request(Message("user", "urgent"), tools=()))
        finally:
            await model.aclose()
    assert (plain.service_tier, urgent.service_tier) == ("standard", "priority")


async def test_the_key_goes_in_x_api_key_only_and_a_wrong_one_is_an_auth_error_without_the_key() -> None:
    with AnthropicServer({"fallback": "hi"}, api_key=KEY) as server:
        good = AnthropicChatModel(MODEL, base_url=server.base_url, api_key=KEY)
        bad = AnthropicChatModel(MODEL, base_url=server.base_url, api_key="sk-ant-wrong-canary")
        try:
            assert (await good.complete(_request(Message("user", "hi"), tools=()))).content == "hi"
            with pytest.raises(ModelError) as refused:
                await bad.complete(_request(Message("user", "hi"), tools=()))
        finally:
            await good.aclose()
            await bad.aclose()
        first = server.requests[0]
    assert refused.value.kind == "auth" and "invalid x-api-key" in str(refused.value)
    assert "canary" not in str(refused.value) and "canary" not in repr(bad)
    assert first.auth_fingerprint == AnthropicServer.key_fingerprint(KEY)
    assert "authorization" not in first.headers and first.headers["anthropic-version"]


@pytest.mark.parametrize("status", [429, 529, 500])
async def test_rate_limits_overload_and_server_errors_are_retried(status: int) -> None:
    script = {"rules": [{"times": 2, "reply": {"fault": {"status": status}}}], "fallback": {"content": "done"}}
    retried: list[str] = []
    with AnthropicServer(script, api_key=KEY) as server:
        model = AnthropicChatModel(MODEL, base_url=server.base_url, api_key=KEY, retry_policy=NO_WAIT,
                                   on_retry=lambda kind, attempt, wait: retried.append(kind))  # fmt: skip
        try:
            answer = await model.complete(_request(Message("user", "hi"), tools=()))
        finally:
            await model.aclose()
        assert len(server.requests) == 3
    assert answer.content == "done"
    assert retried == ["rate_limited" if status == 429 else "server_error"] * 2


async def test_an_invalid_request_fails_at_once_with_the_providers_message() -> None:
    script = {"rules": [{"reply": {"fault": {"status": 400, "body": "messages.0: bad block"}}}]}
    with AnthropicServer(script, api_key=KEY) as server:
        model = AnthropicChatModel(MODEL, base_url=server.base_url, api_key=KEY, retry_policy=NO_WAIT)
        try:
            with pytest.raises(ModelError) as failed:
                await model.complete(_request(Message("user", "hi"), tools=()))
        finally:
            await model.aclose()
        assert len(server.requests) == 1
    assert failed.value.kind == "bad_request" and "messages.0: bad block" in str(failed.value)


def _post(server: AnthropicServer, body: object, headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
    data = json.dumps(body).encode()
    request = urllib.request.Request(f"{server.base_url}/v1/messages", data=data, headers={"content-type": "application/json", **headers})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


GOOD = {"model": MODEL, "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
HEADERS = {"x-api-key": KEY, "anthropic-version": "2023-06-01"}


@pytest.mark.parametrize(("body", "headers", "status", "kind", "message"), [
    (GOOD, {"x-api-key": KEY}, 400, "invalid_request_error", "anthropic-version: header is required"),
    (GOOD, {"anthropic-version": "2023-06-01"}, 401, "authentication_error", "x-api-key header is required"),
    (GOOD, {"authorization": f"Bearer {KEY}", "anthropic-version": "2023-06-01"}, 401, "authentication_error", "x-api-key"),
    ({**GOOD, "max_tokens": None}, HEADERS, 400, "invalid_request_error", "max_tokens"),
    ({k: v for k, v in GOOD.items() if k != "max_tokens"}, HEADERS, 400, "invalid_request_error", "max_tokens: Field required"),
    ({**GOOD, "prompt_cache_key": "k"}, HEADERS, 400, "invalid_request_error", "prompt_cache_key: Extra inputs are not permitted"),
    ({**GOOD, "temperature": 0.2}, HEADERS, 400, "invalid_request_error", "temperature: Extra inputs are not permitted"),
    ({**GOOD, "messages": [{"role": "assistant", "content": "hi"}]}, HEADERS, 400, "invalid_request_error", "first message"),
    # past the hand-written checks, the SDK's own types (runner.model.anthropic_conformance)
    ({**GOOD, "metadata": {"user_id": 5}}, HEADERS, 400, "invalid_request_error", "metadata.user_id: Input should be a valid string"),
    ({**GOOD, "metadata": {"team": "a"}}, HEADERS, 400, "invalid_request_error", "metadata.team: Extra inputs are not permitted"),
    ({**GOOD, "messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": [
        {"type": "tool_use", "id": "toolu_1", "name": "x", "input": {}}]}, {"role": "user", "content": "b"}]},
     HEADERS, 400, "invalid_request_error", "without `tool_result` blocks"),
])  # fmt: skip
def test_the_server_refuses_what_the_messages_api_refuses(
    body: dict[str, Any], headers: dict[str, str], status: int, kind: str, message: str
) -> None:
    with AnthropicServer({"fallback": "hi"}, api_key=KEY) as server:
        answered, error = _post(server, body, headers)
    assert answered == status
    assert error["type"] == "error" and error["error"]["type"] == kind and message in error["error"]["message"]


def test_the_bodies_the_server_refuses_are_the_ones_the_sdk_types_do_not_define() -> None:
    """The strict server and the anthropic package agree on what is not a Messages field."""
    assert unknown_keys({**GOOD, "temperature": 0.2, "prompt_cache_key": "k"}, _params()) == ["/temperature", "/prompt_cache_key"]
    assert unknown_keys(GOOD, _params()) == []


def _params() -> Any:
    from anthropic.types.message_create_params import MessageCreateParamsNonStreaming

    return MessageCreateParamsNonStreaming


def test_cache_reads_and_writes_are_counted_in_the_prompt_and_priced_at_their_rates() -> None:
    from runner.config.prices import cost_usd, default_prices, find_price
    from runner.model.anthropic_wire import parse_usage

    usage = parse_usage({"input_tokens": 100, "output_tokens": 50, "cache_read_input_tokens": 2000, "cache_creation_input_tokens": 1000})
    assert (usage.input_tokens, usage.cached_input_tokens, usage.cache_write_tokens) == (3100, 2000, 1000)
    price = find_price(default_prices(), "claude-sonnet-4-5-20250929")
    assert price is not None
    cost = cost_usd(price, usage.input_tokens, usage.output_tokens, usage.cached_input_tokens, usage.cache_write_tokens)
    assert cost == pytest.approx((100 * 3.00 + 2000 * 0.30 + 1000 * 3.75 + 50 * 15.00) / 1_000_000)  # writes at 1.25x


async def test_a_prefix_written_once_is_billed_as_a_cache_write_then_read() -> None:
    with AnthropicServer({"fallback": "ok"}, api_key=KEY, min_cache_tokens=100) as server:
        model = AnthropicChatModel(MODEL, base_url=server.base_url, api_key=KEY)
        try:
            first = await model.complete(_request(Message("user", "one"), tools=()))
            second = await model.complete(_request(Message("user", "two"), tools=()))
        finally:
            await model.aclose()
        _checked(server)
    assert first.usage.cache_write_tokens > 100 and first.usage.cached_input_tokens == 0
    assert second.usage.cached_input_tokens == first.usage.cache_write_tokens and second.usage.cache_write_tokens == 0
