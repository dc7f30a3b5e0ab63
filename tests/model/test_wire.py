"""Parsing completions and stream chunks from plain dicts."""

from __future__ import annotations

import pytest

from runner.model.wire import InvalidResponse, StreamAccumulator, parse_completion


def test_parse_rejects_completions_without_choices():
    for data in ({}, {"choices": []}, {"choices": [{"index": 0}]}, "text"):
        with pytest.raises(InvalidResponse):
            parse_completion(data)


def test_object_arguments_are_encoded_as_json():
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "a", "function": {"name": "f", "arguments": {"x": 1}}}],
    }
    response = parse_completion({"choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}]})
    assert response.tool_calls[0].arguments == '{"x": 1}'


def test_accumulator_merges_interleaved_tool_call_deltas():
    accumulator = StreamAccumulator()
    for delta in (
        {"tool_calls": [{"index": 1, "id": "b", "function": {"name": "second", "arguments": ""}}]},
        {"tool_calls": [{"index": 0, "id": "a", "function": {"name": "first", "arguments": '{"x"'}}]},
        {"tool_calls": [{"index": 1, "function": {"arguments": "{}"}}]},
        {"tool_calls": [{"index": 0, "function": {"arguments": ": 1}"}}]},
    ):
        accumulator.add({"model": "m", "choices": [{"index": 0, "delta": delta}]})
    accumulator.add({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 4}})
    response = accumulator.result()
    assert [(c.id, c.name, c.arguments) for c in response.tool_calls] == [
        ("a", "first", '{"x": 1}'),
        ("b", "second", "{}"),
    ]
    assert response.content is None and response.usage.output_tokens == 4


def test_empty_stream_is_invalid():
    with pytest.raises(InvalidResponse):
        StreamAccumulator().result()
