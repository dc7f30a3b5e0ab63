"""ScriptedModel: the in-process test double, from scripts and from functions."""

from __future__ import annotations

import json

import pytest

from runner.errors import ModelError
from runner.model.base import ModelRequest, ModelResponse, Usage
from runner.model.openai_client import OpenAIChatModel
from runner.model.scripted import ScriptedModel
from runner.model.server import ScriptedServer
from runner.model.tokens import estimate_prompt_tokens


async def test_sequence_then_fallback(make_request):
    model = ScriptedModel.sequence(
        {"tool_calls": [{"name": "search", "arguments": {"query": "Paris"}}]},
        "Paris is the capital of France.",
    )
    first = await model.complete(make_request("capital?"))
    second = await model.complete(make_request("and?"))
    third = await model.complete(make_request("more?"))
    assert first.tool_calls[0].name == "search" and json.loads(first.tool_calls[0].arguments) == {"query": "Paris"}
    assert first.finish_reason == "tool_calls"
    assert second.content == "Paris is the capital of France." and second.finish_reason == "stop"
    assert third.content == "OK"
    assert [r.messages[-1].content for r in model.requests] == ["capital?", "and?", "more?"]


async def test_rules_see_the_request(make_request, tool_schema):
    model = ScriptedModel({"fallback": None, "rules": [{"when": {"tools": "^calc$"}, "reply": "calculated"}]})
    assert (await model.complete(make_request("x", tools=(tool_schema("calc"),)))).content == "calculated"
    with pytest.raises(ModelError) as caught:
        await model.complete(make_request("x"))
    assert caught.value.kind == "bad_request"


@pytest.mark.timeout(60)
async def test_usage_and_parsing_match_the_http_path(make_request, tool_schema, canary_key):
    request = make_request("Find the height", tools=(tool_schema("search"),), system="Be brief.")
    rules = [{"reply": {"content": "Looking.", "tool_calls": [{"name": "search", "arguments": {"query": "h"}}]}}]
    in_process = await ScriptedModel(rules).complete(request)
    with ScriptedServer(rules) as srv:
        client = OpenAIChatModel("scripted", base_url=srv.base_url, api_key=canary_key)
        try:
            over_http = await client.complete(request)
        finally:
            await client.aclose()
    assert in_process.usage == over_http.usage
    assert in_process.usage.input_tokens == estimate_prompt_tokens(request)
    assert (in_process.content, in_process.tool_calls) == (over_http.content, over_http.tool_calls)


@pytest.mark.parametrize(
    ("reply", "kind"),
    [
        ({"fault": {"status": 429, "retry_after": 5}}, "rate_limited"),
        ({"fault": {"status": 500}}, "server_error"),
        ({"fault": {"status": 401}}, "auth"),
        ({"fault": {"status": 404}}, "not_found"),
        ({"invalid_json": True}, "invalid_response"),
        ({"hang_seconds": 3600}, "timeout"),
    ],
)
async def test_faults_raise_model_errors(make_request, reply, kind):
    with pytest.raises(ModelError) as caught:
        await ScriptedModel([{"reply": reply}]).complete(make_request())
    assert caught.value.kind == kind


async def test_latency_goes_through_the_injected_sleep(make_request, fake_sleep):
    model = ScriptedModel([{"reply": {"content": "slow", "latency_seconds": 2.5}}], sleep=fake_sleep)
    response = await model.complete(make_request())
    assert fake_sleep.waits == [2.5]
    assert response.latency_seconds == 2.5


async def test_function_model_sync_and_async(make_request):
    def echo(request: ModelRequest) -> str:
        return f"you said {request.messages[-1].content}"

    async def tool_then_text(request: ModelRequest) -> dict:
        if request.messages[-1].role == "user":
            return {"tool_calls": [{"name": "lookup", "arguments": '{"q": 1}'}]}
        return {"content": "done"}

    assert (await ScriptedModel(echo).complete(make_request("hi"))).content == "you said hi"
    response = await ScriptedModel(tool_then_text).complete(make_request("go"))
    assert response.tool_calls[0].arguments == '{"q": 1}'


async def test_function_may_return_a_model_response(make_request):
    fixed = ModelResponse(content="exact", usage=Usage(1, 2, 0))
    model = ScriptedModel(lambda request: fixed)
    assert await model.complete(make_request()) is fixed
    assert "function" in repr(model)
