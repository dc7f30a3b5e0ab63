"""Where the calls of an agent on a native provider go (``provider: anthropic`` or ``azure``),
and which key may go there (:mod:`runner.endpoints`).

- ``anthropic``: Anthropic's Messages API. Endpoint: ``--base-url``, else the agent's
  ``model.base_url``, else ``ANTHROPIC_BASE_URL``, else https://api.anthropic.com. Key: the
  variable the agent names in ``model.api_key_env`` (its own endpoint's), else
  ``ANTHROPIC_API_KEY``, which belongs to the standard Anthropic endpoint only (and never goes
  to OpenAI's, nor OPENAI_API_KEY to Anthropic's).
- ``azure``: Azure OpenAI through the openai SDK's Azure client. Endpoint: the resource URL
  (``https://NAME.openai.azure.com``) from ``--base-url``, the agent's ``model.base_url`` or
  ``AZURE_OPENAI_ENDPOINT``; the agent's ``model.deployment`` (default: its ``id``) names the
  deployment, ``model.api_version`` (default ``OPENAI_API_VERSION``, else
  :data:`DEFAULT_AZURE_API_VERSION`) the API version. Key: ``model.api_key_env``, else
  ``AZURE_OPENAI_API_KEY`` (sent as the ``api-key`` header).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from runner.core.providers import Provider
from runner.endpoints import KeyCandidate, choose_key, home_of_standard, safe_url
from runner.errors import ConfigError
from runner.model.endpoint import Endpoint, KeyRefused, check_base_url

if TYPE_CHECKING:
    from runner.config.specs import ModelSpec

DEFAULT_AZURE_API_VERSION = "2024-10-21"
"""The Azure OpenAI data-plane API version sent when neither the agent nor OPENAI_API_VERSION names one."""


def resolve_native(
    spec: ModelSpec, model_id: str, base_url_override: str | None, api_key: str | None, env: Mapping[str, str]
) -> Endpoint:
    """The endpoint of an ``anthropic`` or ``azure`` agent, with the key that belongs to it."""
    keys = spec.provider.standard_keys if spec.provider is not None else None
    assert keys is not None, f"model '{model_id}': provider {spec.provider} has no standard endpoint"
    standard = base_url_override or env.get(keys.base_variable) or keys.default_url
    target = base_url_override or spec.base_url or standard
    if target is None:
        raise ConfigError(
            f"model '{model_id}' (provider azure): no endpoint; set {keys.base_variable} to the resource URL "
            "(https://NAME.openai.azure.com) or give model.base_url"
        )
    where = "--base-url" if base_url_override else "model.base_url" if spec.base_url else f"${keys.base_variable}"
    check_base_url(target, where)
    candidates = [KeyCandidate(api_key, standard or target, "the API key given by the caller (e.g. an Airflow connection)")]
    if spec.api_key_env:
        home = home_of_standard(spec.api_key_env, env, base_url_override)
        candidates.append(KeyCandidate(env.get(spec.api_key_env), home or spec.base_url or standard or target, spec.api_key_env))
    candidates.append(KeyCandidate(env.get(keys.key_variable), standard or target, keys.key_variable))
    key, withheld = choose_key(target, candidates)
    if key is None and withheld:
        names = " and ".join(withheld)
        raise KeyRefused(spec, "/model/api_key_env", (
            f"{names} does not belong to {safe_url(target)}, so it is not sent there. To fix: set model.api_key_env to "
            f"the name of a variable holding the key for {safe_url(target)}, or set {keys.key_variable} for it"
        ))  # fmt: skip
    if key is None:
        variable = spec.api_key_env or keys.key_variable
        raise ConfigError(f"model '{model_id}' (provider {spec.provider}): no API key found; set {variable}")
    if spec.provider is Provider.AZURE:
        version = spec.api_version or env.get("OPENAI_API_VERSION") or DEFAULT_AZURE_API_VERSION
        return Endpoint(Provider.AZURE, model_id, target, key, deployment=spec.deployment or model_id, api_version=version)
    return Endpoint(Provider.ANTHROPIC, model_id, target, key)
