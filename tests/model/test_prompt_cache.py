"""Cache-aware requests: the static part first, the prompt cache key only where it is known to
be accepted (or asked for), cached tokens read from both usage dialects."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from runner.config.project import load_project
from runner.config.specs import AgentSpec, ModelSpec, ToolRef
from runner.core.providers import Provider
from runner.model.base import Message, ModelRequest
from runner.model.prompt_cache import accepts_prompt_cache_key, derived_key, prompt_cache_key
from runner.model.wire import parse_usage, request_body

AGENT = AgentSpec(
    name="triager",
    model=ModelSpec(id="gpt-4o-mini"),
    system_prompt="You triage tickets.",
    tools=(ToolRef("calculator"),),
    examples=(("printer jammed", "hardware"),),
)
SCHEMA_PATTERN = re.compile(r"^[A-Za-z0-9._:/@+=-]+$")


def with_setting(setting: str | bool | None) -> AgentSpec:
    return replace(AGENT, model=replace(AGENT.model, prompt_cache_key=setting))


def test_the_derived_key_is_stable_and_follows_the_configuration() -> None:
    key = derived_key(AGENT, "gpt-4o-mini")
    assert key == derived_key(AGENT, "gpt-4o-mini") and re.fullmatch(r"runner-[0-9a-f]{24}", key)
    assert SCHEMA_PATTERN.match(key) and len(key) <= 64
    assert derived_key(replace(AGENT, system_prompt="You triage bugs."), "gpt-4o-mini") != key
    assert derived_key(replace(AGENT, tools=()), "gpt-4o-mini") != key
    assert derived_key(AGENT, "gpt-4o") != key


@pytest.mark.parametrize(
    ("provider", "base_url", "accepted"),
    [
        ("openai", None, True),  # the SDK's default endpoint
        ("openai", "https://api.openai.com/v1", True),
        ("openai", "https://API.OpenAI.com:443/v1/", True),
        ("openai", "http://api.openai.com/v1", False),  # another scheme is another endpoint
        ("openai", "https://api.openai.com.evil.example/v1", False),
        ("openai", "http://localhost:11434/v1", False),  # Ollama
        ("openai", "https://my-resource.openai.azure.com/openai", False),
        ("local", None, False),
        ("fixed", None, False),
    ],
)
def test_only_openais_api_is_known_to_accept_the_key(provider: str, base_url: str | None, accepted: bool) -> None:
    assert accepts_prompt_cache_key(Provider(provider), base_url) is accepted
    sent = prompt_cache_key(AGENT, "gpt-4o-mini", Provider(provider), base_url)
    assert sent == (derived_key(AGENT, "gpt-4o-mini") if accepted else None)


@pytest.mark.parametrize(
    ("setting", "to_openai", "to_local_server"),
    [
        (False, None, None),
        (True, "derived", "derived"),
        ("team-a/triage", "team-a/triage", "team-a/triage"),
    ],
)
def test_the_agent_decides_explicitly(setting: str | bool, to_openai: str | None, to_local_server: str | None) -> None:
    agent = with_setting(setting)
    derived = derived_key(agent, "m")
    expected = {None: None, "derived": derived}
    sent_openai = prompt_cache_key(agent, "m", "openai", None)
    sent_local = prompt_cache_key(agent, "m", "openai", "http://localhost:8000/v1")
    assert sent_openai == expected.get(to_openai, to_openai)
    assert sent_local == expected.get(to_local_server, to_local_server)


def request(goal: str, key: str | None = None) -> ModelRequest:
    tools = ({"type": "function", "function": {"name": "calculator", "description": "d", "parameters": {"type": "object"}}},)
    messages = (
        Message("system", "You triage tickets."),
        Message("user", "printer jammed"),
        Message("assistant", "hardware"),
        Message("user", goal),
    )
    return ModelRequest("gpt-4o-mini", messages, tools, max_tokens=50, temperature=0, prompt_cache_key=key)


def test_the_body_puts_what_every_row_shares_first_and_the_messages_last() -> None:
    body = request("Triage: my screen is blank", "k1")
    encoded = json.dumps(request_body(body))
    assert list(request_body(body)) == ["model", "tools", "tool_choice", "max_tokens", "temperature", "prompt_cache_key", "messages"]
    other = json.dumps(request_body(request("Triage: the fan is loud", "k1")))
    common = encoded[: next(i for i, (a, b) in enumerate(zip(encoded, other, strict=False)) if a != b)]
    assert common.endswith('{"role": "user", "content": "Triage: ')
    assert "Triage: my screen" not in common


def test_no_key_field_without_a_key() -> None:
    assert "prompt_cache_key" not in request_body(request("x"))
    assert request_body(request("x", "k"))["prompt_cache_key"] == "k"


@pytest.mark.parametrize(
    ("usage", "cached"),
    [
        ({"prompt_tokens": 100, "completion_tokens": 5, "prompt_tokens_details": {"cached_tokens": 64}}, 64),
        ({"prompt_tokens": 100, "completion_tokens": 5, "prompt_cache_hit_tokens": 80, "prompt_cache_miss_tokens": 20}, 80),
        ({"prompt_tokens": 100, "prompt_tokens_details": {"cached_tokens": 0}, "prompt_cache_hit_tokens": 80}, 0),
        ({"prompt_tokens": 100, "prompt_tokens_details": None, "prompt_cache_hit_tokens": 30}, 30),
        ({"prompt_tokens": 100, "prompt_cache_hit_tokens": True}, 0),
        ({"prompt_tokens": 100, "prompt_cache_hit_tokens": "80"}, 0),
        ({"prompt_tokens": 100}, 0),
    ],
)
def test_cached_tokens_are_read_in_openai_and_deepseek_form(usage: dict[str, object], cached: int) -> None:
    assert parse_usage(usage).cached_input_tokens == cached


AGENT_YAML = """\
apiVersion: runner/v1
kind: Agent
name: a
model: {{id: gpt-4o-mini, prompt_cache_key: {value}}}
"""


@pytest.mark.parametrize("value", ["true", "false", "team-a/triage", "'runner:v1@x+y=z'"])
def test_valid_settings_reach_the_spec(tmp_path: Path, value: str) -> None:
    (tmp_path / "agents.d").mkdir()
    (tmp_path / "agents.d/a.yaml").write_text(AGENT_YAML.format(value=value))
    project, problems = load_project(tmp_path, use_cache=False)
    assert problems == []
    expected: object = {"true": True, "false": False}.get(value, value.strip("'"))
    assert project.agents["a"].model.prompt_cache_key == expected


@pytest.mark.parametrize("value", ["''", "3", "'has space'", "'" + "k" * 65 + "'", "[a]", "'tab\\there'", "null"])
def test_invalid_settings_are_located_errors(tmp_path: Path, value: str) -> None:
    (tmp_path / "agents.d").mkdir()
    (tmp_path / "agents.d/a.yaml").write_text(AGENT_YAML.format(value=value.replace("\\t", "\t")))
    _, problems = load_project(tmp_path, use_cache=False)
    assert [(p.file, p.line, p.pointer) for p in problems] == [("agents.d/a.yaml", 4, "/model/prompt_cache_key")]
