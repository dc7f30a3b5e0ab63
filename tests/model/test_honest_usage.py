"""The scripted endpoints' ``tokenizer`` setting: usage counted as the runner reserves it, or
honestly, as an endpoint with a known tokenizer would bill it."""

from __future__ import annotations

import asyncio
import json

import pytest

from runner.errors import ConfigError
from runner.model.base import Message, ModelRequest, ToolCall
from runner.model.openai_client import OpenAIChatModel
from runner.model.replies import USAGE_TOKENIZERS, usage_counter
from runner.model.script_rules import Script
from runner.model.scripted import ScriptedModel
from runner.model.server import ScriptedServer
from runner.model.tokens import OPENAI_FRAMING, counter_for_model, estimate_prompt_tokens, exact_counter, utf8_length
from runner.model.wire import request_body

pytestmark = pytest.mark.timeout(60)
REPLY = {"content": "Total: 4,5,6 → 15 東京", "tool_calls": [{"name": "calculator", "arguments": {"expression": "4+5+6"}}]}


def request(model: str) -> ModelRequest:
    call = ToolCall("call_1", "calculator", '{"expression": "1,2,3"}')
    return ModelRequest(
        model=model,
        messages=(
            Message("system", "Add."),
            Message("user", "1,2,3,東京"),
            Message("assistant", None, (call,)),
            Message("tool", "6", tool_call_id="call_1"),
        ),
        max_tokens=50,
    )


def ask_server(script: dict, model: str) -> tuple[int, int]:
    async def go() -> tuple[int, int]:
        with ScriptedServer(script) as srv:
            client = OpenAIChatModel(model, base_url=srv.base_url, api_key="sk-test", max_retries=0)
            try:
                response = await client.complete(request(model))
            finally:
                await client.aclose()
        return response.usage.input_tokens, response.usage.output_tokens

    return asyncio.run(go())


def completion(counter_model: str = "", tokenizer: str = "estimate") -> int:
    counter = usage_counter(tokenizer, counter_model)
    return counter.completion_tokens(REPLY["content"], [("calculator", json.dumps(REPLY["tool_calls"][0]["arguments"]))])


@pytest.mark.parametrize("model", ["gpt-4o-mini", "gpt-4", "deepseek-chat"])
def test_estimate_mode_reports_what_the_runner_reserves(model: str) -> None:
    prompt, output = ask_server({"fallback": REPLY}, model)
    assert prompt == estimate_prompt_tokens(request(model))
    assert output == completion(model)


@pytest.mark.parametrize("tokenizer", ["o200k_base", "cl100k_base"])
def test_openai_tokenizers_report_exact_counts(tokenizer: str) -> None:
    prompt, output = ask_server({"tokenizer": tokenizer, "fallback": REPLY}, "any-model")
    counter = exact_counter(tokenizer)
    assert prompt == counter.prompt_tokens(request_body(request("any-model")))
    assert output == completion(tokenizer=tokenizer)
    # for a model of that family the runner's estimate is the honest count
    model = "gpt-4o" if tokenizer == "o200k_base" else "gpt-4"
    assert ask_server({"tokenizer": tokenizer, "fallback": REPLY}, model)[0] == estimate_prompt_tokens(request(model))


def test_utf8_bytes_reports_one_token_per_byte_with_openai_framing() -> None:
    prompt, output = ask_server({"tokenizer": "utf8_bytes", "fallback": REPLY}, "qwen-plus")
    texts = ["system", "Add.", "user", "1,2,3,東京", "assistant", "call_1", "calculator", '{"expression": "1,2,3"}',
             "tool", "6", "call_1"]  # fmt: skip
    framing = OPENAI_FRAMING.per_request + 4 * OPENAI_FRAMING.per_message + OPENAI_FRAMING.per_tool_call
    assert prompt == sum(utf8_length(t) for t in texts) + framing
    assert output == utf8_length(REPLY["content"]) + OPENAI_FRAMING.per_tool_call + len("calculator") + len('{"expression": "4+5+6"}')
    assert prompt <= estimate_prompt_tokens(request("qwen-plus"))  # the runner's bound covers it


def test_explicit_usage_still_wins() -> None:
    script = {"tokenizer": "o200k_base", "fallback": {"content": "x", "usage": {"prompt_tokens": 7, "completion_tokens": 2}}}
    assert ask_server(script, "gpt-4o") == (7, 2)


def test_in_process_model_counts_the_same_way() -> None:
    model = ScriptedModel({"tokenizer": "utf8_bytes", "fallback": REPLY})
    response = asyncio.run(model.complete(request("qwen-plus")))
    assert response.usage.input_tokens == usage_counter("utf8_bytes", "qwen-plus").prompt_tokens(request_body(request("qwen-plus")))
    assert counter_for_model("qwen-plus").prompt_tokens(request_body(request("qwen-plus"))) > response.usage.input_tokens


@pytest.mark.parametrize("bad", ["o200k", "bytes", "", 3, None, ["o200k_base"]])
def test_unknown_tokenizers_are_config_errors(bad: object) -> None:
    with pytest.raises(ConfigError, match=r"tokenizer: expected one of estimate, o200k_base, cl100k_base, utf8_bytes"):
        Script.from_obj({"tokenizer": bad, "rules": []}, "script.yaml")
    with pytest.raises(ConfigError, match="tokenizer"):
        Script(tokenizer=bad)  # type: ignore[arg-type]
    assert set(USAGE_TOKENIZERS) == {"estimate", "o200k_base", "cl100k_base", "utf8_bytes"}
