"""Fixtures for the model tests: a clean SDK environment, a recording fake sleep, requests."""

from __future__ import annotations

import pytest

from runner.model.base import Message, ModelRequest

CANARY_KEY = "sk-canary-XXXX-0123456789abcdef"


@pytest.fixture(autouse=True)
def _clean_sdk_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The SDK reads these; a developer's shell must not change what the tests see."""
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_CUSTOM_HEADERS", "OPENAI_ADMIN_KEY", "OPENAI_ORG_ID",
                 "OPENAI_PROJECT_ID", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy",
                 "all_proxy"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)


class FakeSleep:
    """Records requested waits instead of sleeping."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


@pytest.fixture
def fake_sleep() -> FakeSleep:
    return FakeSleep()


def _make_request(text: str = "Hello", *, tools: tuple[dict, ...] = (), system: str | None = None) -> ModelRequest:
    messages = ((Message("system", system),) if system else ()) + (Message("user", text),)
    return ModelRequest(model="scripted", messages=messages, tools=tools, max_tokens=64)


def _tool_schema(name: str) -> dict:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": f"The {name} tool.",
            "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
        },
    }


@pytest.fixture
def make_request():
    """``make_request(text, tools=(), system=None)``: a one-turn ModelRequest."""
    return _make_request


@pytest.fixture
def tool_schema():
    """``tool_schema(name)``: an OpenAI function-tool dict taking one string ``query``."""
    return _tool_schema


@pytest.fixture
def canary_key() -> str:
    """An API key that must never show up in errors, reprs or recordings."""
    return CANARY_KEY
