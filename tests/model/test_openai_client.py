"""OpenAIChatModel through the real openai SDK and real HTTP, against ScriptedServer."""

from __future__ import annotations

import json
import pickle
import random
import socket
from dataclasses import asdict

import pytest

from runner.errors import ModelError
from runner.model.base import Usage
from runner.model.faults import RetryPolicy
from runner.model.openai_client import OpenAIChatModel
from runner.model.server import ScriptedServer
from runner.model.tokens import estimate_prompt_tokens

pytestmark = pytest.mark.timeout(60)

NO_JITTER = RetryPolicy(max_retries=3, base_delay_seconds=0.5, max_delay_seconds=8.0, jitter=0.0)


@pytest.fixture
async def connect(canary_key, fake_sleep):
    """``connect(server, **options)``: an OpenAIChatModel on the server, closed at teardown."""
    models: list[OpenAIChatModel] = []

    def _connect(server: ScriptedServer, **options) -> OpenAIChatModel:
        options = {"api_key": canary_key, "sleep": fake_sleep, "timeout_seconds": 10.0, **options}
        model = OpenAIChatModel("scripted", base_url=server.base_url, **options)
        models.append(model)
        return model

    yield _connect
    for model in models:
        await model.aclose()


async def test_plain_reply(connect, make_request):
    with ScriptedServer([{"reply": "Hello there."}]) as srv:
        response = await connect(srv).complete(make_request("Hi"))
    assert response.content == "Hello there."
    assert response.tool_calls == ()
    assert response.finish_reason == "stop"
    assert response.model == "scripted"
    assert response.latency_seconds > 0
    (sent,) = srv.requests
    assert sent.body["messages"] == [{"role": "user", "content": "Hi"}]
    assert sent.body["max_tokens"] == 64
    assert not {"tools", "tool_choice", "temperature"} & set(sent.body)


async def test_tool_calls_with_raw_malformed_arguments(connect, make_request, tool_schema):
    reply = {
        "tool_calls": [
            {"name": "search", "arguments": {"query": "capital of France"}},
            {"name": "search", "arguments": '{"query": '},
        ]
    }
    with ScriptedServer([{"when": {"tools": "^search$"}, "reply": reply}]) as srv:
        response = await connect(srv).complete(make_request("Find it", tools=(tool_schema("search"),)))
    assert [c.name for c in response.tool_calls] == ["search", "search"]
    assert json.loads(response.tool_calls[0].arguments) == {"query": "capital of France"}
    assert response.tool_calls[1].arguments == '{"query": '
    assert len({c.id for c in response.tool_calls}) == 2
    assert response.finish_reason == "tool_calls"
    assert srv.requests[0].body["tool_choice"] == "auto"
    assert srv.requests[0].body["tools"][0]["function"]["name"] == "search"


async def test_usage_is_parsed_including_cached_tokens(connect, make_request):
    usage = {"prompt_tokens": 123, "completion_tokens": 45, "cached_tokens": 100}
    with ScriptedServer([{"reply": {"content": "x", "usage": usage}}]) as srv:
        response = await connect(srv).complete(make_request())
    assert response.usage == Usage(input_tokens=123, output_tokens=45, cached_input_tokens=100)


async def test_estimated_usage_matches_the_tokens_module(connect, make_request, tool_schema):
    request = make_request("How tall is the Eiffel tower?", tools=(tool_schema("search"),), system="Be brief.")
    with ScriptedServer([{"reply": "About 330 m."}]) as srv:
        response = await connect(srv).complete(request)
    assert response.usage.input_tokens == estimate_prompt_tokens(request)
    assert response.usage.output_tokens > 0


async def test_streaming_accumulates_content_tool_call_deltas_and_usage(connect, make_request, tool_schema):
    reply = {
        "content": "Let me look that up for you.",
        "tool_calls": [
            {"name": "search", "arguments": {"query": "Eiffel tower height", "limit": 3}},
            {"name": "fetch", "arguments": {"query": "https://example.org/a"}},
        ],
    }
    request = make_request("How tall?", tools=(tool_schema("search"), tool_schema("fetch")))
    with ScriptedServer([{"reply": reply}]) as srv:
        streamed = await connect(srv, stream=True).complete(request)
        whole = await connect(srv).complete(request)
    assert srv.requests[0].body["stream"] is True
    assert srv.requests[0].body["stream_options"] == {"include_usage": True}
    assert streamed.content == whole.content == "Let me look that up for you."
    assert [(c.name, json.loads(c.arguments)) for c in streamed.tool_calls] == [
        ("search", {"query": "Eiffel tower height", "limit": 3}),
        ("fetch", {"query": "https://example.org/a"}),
    ]
    assert [c.id for c in streamed.tool_calls] == ["call_1_0", "call_1_1"]
    assert streamed.usage == whole.usage != Usage()
    assert streamed.finish_reason == "tool_calls"


async def test_429_with_short_retry_after_is_retried(connect, make_request, fake_sleep):
    events = []
    rules = [{"times": 1, "reply": {"fault": {"status": 429, "retry_after": 2}}}, {"reply": "done"}]
    with ScriptedServer(rules) as srv:
        model = connect(srv, on_retry=lambda *event: events.append(event))
        response = await model.complete(make_request())
    assert response.content == "done"
    assert fake_sleep.waits == [2.0]
    assert events == [("rate_limited", 1, 2.0)]
    assert len(srv.requests) == 2


async def test_429_with_long_retry_after_fails_at_once(connect, make_request, fake_sleep):
    with (
        ScriptedServer([{"reply": {"fault": {"status": 429, "retry_after": 3600}}}]) as srv,
        pytest.raises(ModelError) as caught,
    ):
        await connect(srv).complete(make_request())
    assert caught.value.kind == "rate_limited"
    assert "3600 s" in str(caught.value)
    assert fake_sleep.waits == []
    assert len(srv.requests) == 1


async def test_repeated_500_gives_up_after_retries_with_backoff(connect, make_request, fake_sleep):
    with ScriptedServer([{"reply": {"fault": {"status": 500}}}]) as srv, pytest.raises(ModelError) as caught:
        await connect(srv, retry_policy=NO_JITTER).complete(make_request())
    assert caught.value.kind == "server_error"
    assert "after 4 attempts" in str(caught.value)
    assert fake_sleep.waits == [0.5, 1.0, 2.0]
    assert len(srv.requests) == 4


async def test_backoff_is_capped_and_jittered(connect, make_request, fake_sleep):
    policy = RetryPolicy(max_retries=8, base_delay_seconds=0.5, max_delay_seconds=4.0, jitter=0.25)
    with (
        ScriptedServer([{"reply": {"fault": {"status": 503}}}]) as srv,
        pytest.raises(ModelError, match="server_error"),
    ):
        await connect(srv, retry_policy=policy, rng=random.Random(7)).complete(make_request())
    assert len(fake_sleep.waits) == 8
    assert all(0.5 <= wait <= 4.0 for wait in fake_sleep.waits)
    assert fake_sleep.waits[-1] >= 4.0 * 0.75


async def test_server_error_then_success(connect, make_request, fake_sleep):
    with ScriptedServer([{"times": 2, "reply": {"fault": {"status": 503}}}, {"reply": "ok now"}]) as srv:
        response = await connect(srv, max_retries=2).complete(make_request())
    assert response.content == "ok now"
    assert len(fake_sleep.waits) == 2


@pytest.mark.parametrize("stream", [False, True])
async def test_hang_becomes_timeout(connect, make_request, fake_sleep, stream):
    with ScriptedServer([{"reply": {"hang_seconds": 60}}]) as srv, pytest.raises(ModelError) as caught:
        await connect(srv, timeout_seconds=0.5, max_retries=1, stream=stream).complete(make_request())
    assert caught.value.kind == "timeout"
    assert len(fake_sleep.waits) == 1
    assert len(srv.wait_for_requests(2)) == 2  # the retry reached the server (read by its thread, maybe later)


@pytest.mark.parametrize("stream", [False, True])
async def test_invalid_json_is_retried_then_reported(connect, make_request, fake_sleep, stream):
    with ScriptedServer([{"reply": {"invalid_json": True}}]) as srv, pytest.raises(ModelError) as caught:
        await connect(srv, stream=stream).complete(make_request())
    assert caught.value.kind == "invalid_response"
    assert len(srv.requests) == 3  # RetryPolicy.invalid_response_retries == 2
    assert len(fake_sleep.waits) == 2


async def test_invalid_json_once_then_success(connect, make_request):
    with ScriptedServer([{"times": 1, "reply": {"invalid_json": True}}, {"reply": "fine"}]) as srv:
        assert (await connect(srv).complete(make_request())).content == "fine"


@pytest.mark.parametrize(
    ("status", "kind"), [(401, "auth"), (403, "auth"), (400, "bad_request"), (422, "bad_request"), (404, "not_found")]
)
async def test_client_errors_are_not_retried(connect, make_request, fake_sleep, status, kind):
    with ScriptedServer([{"reply": {"fault": {"status": status}}}]) as srv, pytest.raises(ModelError) as caught:
        await connect(srv).complete(make_request())
    assert caught.value.kind == kind
    assert f"HTTP {status}" in str(caught.value)
    assert fake_sleep.waits == []
    assert len(srv.requests) == 1


async def test_connection_refused_is_classified(make_request, fake_sleep, canary_key):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    model = OpenAIChatModel("m", base_url=f"http://127.0.0.1:{port}/v1", api_key=canary_key, sleep=fake_sleep)
    try:
        with pytest.raises(ModelError) as caught:
            await model.complete(make_request())
    finally:
        await model.aclose()
    assert caught.value.kind == "unreachable"  # nothing was sent: retried, but never billed
    assert len(fake_sleep.waits) == 3


async def test_canary_key_never_leaks(connect, make_request, canary_key, tmp_path):
    echo = {"error": {"message": f"Incorrect API key provided: {canary_key}. Header: Bearer {canary_key}"}}
    record = tmp_path / "requests.jsonl"
    with ScriptedServer([{"reply": {"fault": {"status": 401, "body": echo}}}], record_path=record) as srv:
        model = connect(srv, default_headers={"X-Api-Key": canary_key, "X-Team": "blue"})
        with pytest.raises(ModelError) as caught:
            await model.complete(make_request())
    error = caught.value
    assert error.kind == "auth"
    assert error.__cause__ is None and error.__context__ is None
    for text in (str(error), repr(error), repr(error.args), repr(model), str(model)):
        assert canary_key not in text and "canary" not in text
    recorded = json.dumps([asdict(r) for r in srv.requests]) + record.read_text()
    assert canary_key not in recorded
    assert srv.requests[0].auth_present
    assert srv.requests[0].auth_fingerprint == ScriptedServer.key_fingerprint(canary_key)
    assert srv.requests[0].headers["x-team"] == "blue"
    with pytest.raises(TypeError):
        pickle.dumps(model)


async def test_missing_api_key_is_an_auth_error():
    with pytest.raises(ModelError) as caught:
        OpenAIChatModel("m", base_url="http://127.0.0.1:9/v1")
    assert caught.value.kind == "auth"
    assert caught.value.__context__ is None
