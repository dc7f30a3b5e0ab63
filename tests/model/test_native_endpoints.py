"""Which key goes where for the native providers: each provider's standard key goes only to
its own standard endpoint (ANTHROPIC_API_KEY never to OpenAI's, OPENAI_API_KEY never to
Anthropic's), an agent's own variable to its own endpoint."""

from __future__ import annotations

import pytest

from runner.config.specs import ModelSpec
from runner.core.providers import Provider
from runner.errors import ConfigError
from runner.model.endpoint import KeyRefused
from runner.model.factory import resolve_endpoint

ENV = {"ANTHROPIC_API_KEY": "sk-ant-1", "OPENAI_API_KEY": "sk-oa-1", "AZURE_OPENAI_API_KEY": "az-1",
       "AZURE_OPENAI_ENDPOINT": "https://res.openai.azure.com"}  # fmt: skip


def test_an_anthropic_agent_gets_the_anthropic_key_for_anthropics_endpoint() -> None:
    endpoint = resolve_endpoint(ModelSpec("claude-haiku-4-5", provider=Provider.ANTHROPIC), environ=ENV)
    assert (endpoint.provider, endpoint.base_url, endpoint.api_key) == (Provider.ANTHROPIC, "https://api.anthropic.com", "sk-ant-1")


def test_the_openai_key_never_goes_to_anthropic() -> None:
    with pytest.raises(ConfigError, match="no API key found; set ANTHROPIC_API_KEY"):
        resolve_endpoint(ModelSpec("claude-haiku-4-5", provider=Provider.ANTHROPIC), environ={"OPENAI_API_KEY": "sk-oa-1"})


def test_the_anthropic_key_never_goes_to_another_endpoint() -> None:
    with pytest.raises(KeyRefused, match=r"ANTHROPIC_API_KEY does not belong to https://proxy\.example"):
        resolve_endpoint(ModelSpec("claude-haiku-4-5", provider=Provider.ANTHROPIC, base_url="https://proxy.example"),
                         environ={"ANTHROPIC_API_KEY": "sk-ant-1"})  # fmt: skip
    with pytest.raises(KeyRefused):  # named by an OpenAI agent, it still belongs to Anthropic's endpoint
        resolve_endpoint(ModelSpec("gpt-4o-mini", provider=Provider.OPENAI, api_key_env="ANTHROPIC_API_KEY",
                                   base_url="https://llm.example/v1"), environ={"ANTHROPIC_API_KEY": "sk-ant-1"})  # fmt: skip


def test_an_agents_own_variable_goes_to_its_own_endpoint() -> None:
    spec = ModelSpec("claude-haiku-4-5", provider=Provider.ANTHROPIC, base_url="https://proxy.example", api_key_env="PROXY_KEY")
    endpoint = resolve_endpoint(spec, environ={**ENV, "PROXY_KEY": "pk-1"})
    assert (endpoint.base_url, endpoint.api_key) == ("https://proxy.example", "pk-1")


def test_an_azure_agent_gets_its_deployment_version_and_key() -> None:
    spec = ModelSpec("gpt-4o-mini", provider=Provider.AZURE, deployment="triage-mini")
    endpoint = resolve_endpoint(spec, environ={**ENV, "OPENAI_API_VERSION": "2025-01-01-preview"})
    assert (endpoint.base_url, endpoint.api_key, endpoint.deployment, endpoint.api_version) == (
        "https://res.openai.azure.com", "az-1", "triage-mini", "2025-01-01-preview")
    with pytest.raises(ConfigError, match="set AZURE_OPENAI_ENDPOINT"):
        resolve_endpoint(spec, environ={"AZURE_OPENAI_API_KEY": "az-1"})
