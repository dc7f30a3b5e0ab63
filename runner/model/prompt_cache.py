"""Prompt caching: the ``prompt_cache_key`` a request carries, if any.

Providers cache the longest prefix two prompts share; the runner keeps an agent's static
part (model, tools, system prompt, examples) first and byte-stable and the per-row goal
last (see :func:`runner.model.wire.request_body`). OpenAI also takes a
``prompt_cache_key`` that routes requests sharing a prefix to the same cache.

An agent's ``model.prompt_cache_key`` decides:

* absent: a key derived from the agent's configuration (the same for every row and run of
  an unchanged agent), sent only to OpenAI's own API, the endpoint known to accept the
  field; never to another endpoint, some of which reject unknown fields;
* a string: that key, to whatever endpoint the agent calls (its author vouches for it);
* ``true``: the derived key, to any endpoint; ``false``: no key.
"""

from __future__ import annotations

import hashlib

from runner.config.specs import AgentSpec
from runner.core.providers import Provider
from runner.endpoints import DEFAULT_BASE_URL, same_endpoint

KEY_PREFIX = "runner-"


def derived_key(agent: AgentSpec, model_id: str) -> str:
    """The key of ``agent`` calling ``model_id``: a hash of its resolved configuration (which
    names no secret: keys are only ever named by their variable)."""
    digest = hashlib.sha256(f"{model_id}\0{agent!r}".encode()).hexdigest()
    return KEY_PREFIX + digest[:24]


def accepts_prompt_cache_key(provider: Provider, base_url: str | None) -> bool:
    """Whether an endpoint is known to accept ``prompt_cache_key``: OpenAI's API."""
    return provider is Provider.OPENAI and same_endpoint(base_url or DEFAULT_BASE_URL, DEFAULT_BASE_URL)


def prompt_cache_key(agent: AgentSpec, model_id: str, provider: Provider, base_url: str | None) -> str | None:
    """The key ``agent``'s calls carry to the endpoint ``(provider, base_url)``, or ``None``."""
    setting = agent.model.prompt_cache_key
    if setting is False:
        return None
    if isinstance(setting, str):
        return setting
    if setting is True or accepts_prompt_cache_key(provider, base_url):
        return derived_key(agent, model_id)
    return None
