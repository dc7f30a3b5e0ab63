"""An endpoint: where one agent's calls go (provider, model, URL, key), and the checks every
way of choosing one shares (the base URL's form, a key that belongs to another endpoint).
:mod:`runner.model.factory` chooses OpenAI-compatible endpoints, :mod:`runner.model.native_endpoints`
Anthropic's and Azure's; both build this type.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from runner.config.specs import ModelSpec
from runner.core.providers import Provider
from runner.endpoints import shown_url
from runner.errors import ConfigError
from runner.model.base import Tariff
from runner.redact import redact


@dataclass(frozen=True)
class Endpoint:
    """Where one agent's calls go. ``api_key`` is never logged or stored."""

    provider: Provider
    model_id: str
    base_url: str | None = None
    api_key: str | None = field(default=None, repr=False)
    tariff: Tariff = "live"  # batch: the calls go through the provider's Batch API (runner batch --via batch-api)
    deployment: str | None = None  # azure: the deployment the calls go to
    api_version: str | None = None  # azure: the api-version query parameter
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)  # model.extra_headers, sorted: sent with every request (Batch API's too); may hold a token


def check_base_url(url: str, where: str) -> None:
    """A :class:`ConfigError` naming ``where`` the URL came from unless it is an http(s) URL
    with a host (and a numeric port): anything else fails every call, after retries, and one
    Python cannot parse at all (``http://[::1``) used to end the run with a traceback. The
    message never shows the URL's user info or query, which may hold a key."""
    from urllib.parse import SplitResult, urlsplit

    try:
        parts: SplitResult | None = urlsplit(url.strip())
    except ValueError:
        parts = None
    try:
        usable = parts is not None and parts.port != -1 and parts.scheme in ("http", "https") and bool(parts.hostname)
    except ValueError:  # a port that is not a number in range
        usable = False
    if not usable:
        if parts is not None and parts.scheme in ("http", "https"):
            shown = f"{parts.scheme}://{parts.hostname or ''}{parts.path}"
        else:  # not parsed, or not http(s): "user:sk-...@host" parses as scheme "user"; a key pasted here
            shown = redact(shown_url(url))
        raise ConfigError(f"{where} {shown!r} is not an http(s) URL with a host (and a port from 1 to 65535); give the endpoint's base URL, "
                          "e.g. http://localhost:11434/v1 or https://api.openai.com/v1")  # fmt: skip


class KeyRefused(ConfigError):
    """Every key available belongs to another endpoint than the one this agent would call."""

    def __init__(self, spec: ModelSpec, pointer: str, message: str) -> None:
        self.pointer, self.message = pointer, message
        where = f"{spec.source}: " if spec.source else ""
        super().__init__(f"{where}{pointer}: {message}")
