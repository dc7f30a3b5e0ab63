"""Prompt token estimates err on the high side."""

from __future__ import annotations

from runner.model.base import Message, ModelRequest, ToolCall
from runner.model.tokens import estimate_completion_tokens, estimate_prompt_tokens, estimate_text_tokens


def test_text_estimate_is_above_four_chars_per_token():
    text = "The quick brown fox jumps over the lazy dog. " * 20
    assert estimate_text_tokens(text) >= len(text) / 4
    assert estimate_text_tokens("") == estimate_text_tokens(None) == 0


def test_non_ascii_counts_one_token_per_character():
    assert estimate_text_tokens("東京都") == 3
    assert estimate_text_tokens("café") == 2  # "caf" -> 1, "é" -> 1


def test_prompt_estimate_counts_messages_tool_calls_and_tools(make_request, tool_schema):
    bare = estimate_prompt_tokens(make_request("hello"))
    with_tools = estimate_prompt_tokens(make_request("hello", tools=(tool_schema("search"),)))
    assert with_tools > bare > estimate_text_tokens("hello")
    call = ToolCall(id="c1", name="search", arguments='{"query": "a long query string here"}')
    history = ModelRequest(
        model="m",
        messages=(Message("user", "hello"), Message("assistant", None, (call,)), Message("tool", "42", (), "c1")),
    )
    assert estimate_prompt_tokens(history) > bare + estimate_text_tokens(call.arguments)


def test_completion_estimate_includes_tool_calls():
    assert estimate_completion_tokens("hi", [("search", '{"q": "x"}')]) > estimate_completion_tokens("hi")
