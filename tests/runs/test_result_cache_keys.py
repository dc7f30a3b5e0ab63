"""What a result-cache key is built from (runner.agent.call_cache): everything a cached answer
depends on and may reveal, so two callers that would get different answers never share one."""

from __future__ import annotations

from runner.agent.call_cache import endpoint_identity, model_key, tool_key, tool_scope
from runner.model.base import Message, ModelRequest
from runner.model.endpoint import Endpoint
from runner.tools.net import NetworkPolicy

REQUEST = ModelRequest("gpt-4o-mini", (Message("user", "hello"),), max_tokens=10, temperature=0)
ARGS = '{"url": "http://10.0.0.5/numbers"}'


def test_the_endpoint_key_owner_and_url_are_part_of_a_model_key() -> None:
    prod = endpoint_identity(Endpoint("openai", "gpt-4o-mini", "https://api.example.com/v1", "sk-one-0123456789"))
    same = endpoint_identity(Endpoint("openai", "gpt-4o-mini", "https://api.example.com/v1/", "sk-one-0123456789"))
    staging = endpoint_identity(Endpoint("openai", "gpt-4o-mini", "https://staging.example.com/v1", "sk-one-0123456789"))
    other_key = endpoint_identity(Endpoint("openai", "gpt-4o-mini", "https://api.example.com/v1", "sk-two-0123456789"))
    assert prod == same  # a trailing slash is the same endpoint
    standard = Endpoint("openai", "gpt-4o-mini", None, "sk-one-0123456789")
    assert endpoint_identity(standard) == endpoint_identity(Endpoint("openai", "gpt-4o-mini", "https://api.openai.com/v1", "sk-one-0123456789"))
    keys = {model_key(REQUEST, identity) for identity in (prod, staging, other_key)}
    assert len(keys) == 3
    assert "sk-one" not in prod and "sk-two" not in other_key  # a fingerprint, never the key


def test_the_network_policy_is_part_of_a_tool_key() -> None:
    settings: dict[str, dict[str, object]] = {"fetch_url": {}}
    inside = tool_scope(NetworkPolicy(allow_private_networks=("10.0.0.0/8",)), settings, {})
    outside = tool_scope(NetworkPolicy(), settings, {})
    hosts = tool_scope(NetworkPolicy(allow_hosts=("*.example.com",)), settings, {})
    denied = tool_scope(NetworkPolicy(deny_hosts=("10.*",)), settings, {})
    smaller = tool_scope(NetworkPolicy(max_bytes=1000), settings, {})
    keys = {tool_key("fetch_url", {}, ARGS, scope) for scope in (inside, outside, hosts, denied, smaller)}
    assert len(keys) == 5
    again = tool_scope(NetworkPolicy(allow_private_networks=("10.0.0.0/8",)), settings, {})
    assert tool_key("fetch_url", {}, ARGS, inside) == tool_key("fetch_url", {}, '{ "url":"http://10.0.0.5/numbers" }', again)


def test_the_key_a_tool_setting_names_is_part_of_a_tool_key() -> None:
    settings = {"web_search": {"provider": "brave", "api_key_env": "BRAVE_KEY"}}
    one = tool_scope(NetworkPolicy(), settings, {"BRAVE_KEY": "brave-account-one"})
    two = tool_scope(NetworkPolicy(), settings, {"BRAVE_KEY": "brave-account-two"})
    query = '{"query": "q"}'
    assert tool_key("web_search", settings["web_search"], query, one) != tool_key("web_search", settings["web_search"], query, two)
    assert "brave-account" not in repr(one)


def test_tools_that_act_or_read_the_workspace_are_never_keyed() -> None:
    scope = tool_scope(NetworkPolicy(), {}, {})
    for name in ("python", "shell", "write_file", "read_file", "browse", "search_knowledge", "sql_query"):
        assert tool_key(name, {}, "{}", scope) is None
