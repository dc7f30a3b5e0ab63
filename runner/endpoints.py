"""Which API key may go to which endpoint.

A key belongs to one endpoint and is sent nowhere else:

- the standard variable ``OPENAI_API_KEY``, and a key handed over by the caller (the
  Airflow connection's password), belong to the *standard endpoint*: ``--base-url`` (or the
  connection's host) when given, else ``OPENAI_BASE_URL``, else :data:`DEFAULT_BASE_URL`;
- the variable an agent names in ``model.api_key_env`` belongs to that agent's endpoint:
  its ``model.base_url``, or the standard endpoint when it has none. Naming a standard
  variable does not make it the agent's own: it still goes only to the standard endpoint.

:func:`runner.model.factory.resolve_endpoint` refuses (exit 2) an agent whose own ``base_url``
would otherwise have received another endpoint's key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

DEFAULT_BASE_URL = "https://api.openai.com/v1"
"""Where the openai SDK sends calls when no base URL is configured."""

STANDARD_KEY_VARIABLES = ("OPENAI_API_KEY",)
"""Variables whose key belongs to the standard endpoint only."""

ANTHROPIC_BASE_URL = "https://api.anthropic.com"
"""Where the anthropic SDK sends calls when no base URL is configured."""


@dataclass(frozen=True)
class ProviderKeys:
    """A provider's standard variables: its key, and the endpoint that key belongs to
    (``base_variable`` when set, else ``default_url``; ``None``: no default endpoint).
    ``follows_base_url_flag``: ``--base-url`` replaces that endpoint (OpenAI's standard
    endpoint is whatever the command points at)."""

    key_variable: str
    base_variable: str
    default_url: str | None
    follows_base_url_flag: bool = False


OPENAI_KEYS = ProviderKeys("OPENAI_API_KEY", "OPENAI_BASE_URL", DEFAULT_BASE_URL, follows_base_url_flag=True)
ANTHROPIC_KEYS = ProviderKeys("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", ANTHROPIC_BASE_URL)
AZURE_KEYS = ProviderKeys("AZURE_OPENAI_API_KEY", "AZURE_OPENAI_ENDPOINT", None)
STANDARD_KEYS = (OPENAI_KEYS, ANTHROPIC_KEYS, AZURE_KEYS)
"""Each provider's standard key goes only to that provider's standard endpoint: ANTHROPIC_API_KEY
never to OpenAI's, OPENAI_API_KEY never to Anthropic's (a provider's own is
:attr:`runner.core.providers.Provider.standard_keys`)."""


def home_of_standard(variable: str, environ: Mapping[str, str], base_url_override: str | None = None) -> str | None:
    """The endpoint a provider's standard key variable belongs to (``None``: not a standard
    variable). ``base_url_override`` (``--base-url``) replaces OpenAI's standard endpoint."""
    for keys in STANDARD_KEYS:
        if keys.key_variable == variable:
            if keys.follows_base_url_flag:
                return standard_endpoint(base_url_override, environ)
            return environ.get(keys.base_variable) or keys.default_url or f"${keys.base_variable}"
    return None

_DEFAULT_PORTS = {"http": 80, "https": 443}


def endpoint_identity(url: str) -> tuple[str, str, int | None, str]:
    """``(scheme, host, port, path)`` with case, default ports, user info and trailing slashes
    normalised, so two spellings of one endpoint compare equal."""
    text = url.strip()
    parts = urlsplit(text if "://" in text else f"https://{text}")
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:  # a malformed port: compare the text as given
        return (scheme, parts.netloc.lower(), None, parts.path.rstrip("/"))
    return (scheme, (parts.hostname or "").lower(), port or _DEFAULT_PORTS.get(scheme), parts.path.rstrip("/"))


def same_endpoint(a: str, b: str) -> bool:
    """Whether two base URLs name the same endpoint."""
    return endpoint_identity(a) == endpoint_identity(b)


def under_endpoint(url: str, base_url: str) -> bool:
    """Whether ``url`` is ``base_url`` or a path below it (same scheme, host and port)."""
    scheme, host, port, path = endpoint_identity(url)
    base_scheme, base_host, base_port, base_path = endpoint_identity(base_url)
    same_origin = (scheme, host, port) == (base_scheme, base_host, base_port)
    return same_origin and (path == base_path or path.startswith(base_path + "/"))


@dataclass(frozen=True)
class KeyCandidate:
    """A key that could be sent, where it belongs, and how to name it to a person."""

    value: str | None
    home: str
    name: str


def choose_key(target: str, candidates: list[KeyCandidate]) -> tuple[str | None, list[str]]:
    """The first candidate that belongs to ``target`` (``None`` if none does), and the names of
    the keys available but withheld because they belong elsewhere."""
    present = [c for c in candidates if c.value]
    for candidate in present:
        if same_endpoint(candidate.home, target):
            return candidate.value, []
    return None, list(dict.fromkeys(c.name for c in present))


def standard_endpoint(base_url_override: str | None, environ: Mapping[str, str]) -> str:
    """The endpoint the standard variables (and the caller's key) belong to."""
    return base_url_override or environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL


def safe_url(url: str) -> str:
    """The URL without user info or query string, which may carry credentials."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    host = f"[{host}]" if ":" in host else host
    try:
        port = parts.port
    except ValueError:
        port = None
    netloc = f"{host}:{port}" if port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def shown_url(url: str) -> str:
    """``url`` without user info, query string or fragment, which may carry credentials; works
    on text :func:`safe_url` cannot parse (``http://user:key@[::1``)."""
    scheme, separator, rest = url.strip().partition("://")
    if not separator:
        scheme, rest = "", url.strip()
    authority, slash, path = rest.partition("?")[0].partition("#")[0].partition("/")
    shown = f"***@{authority.rpartition('@')[2]}" if "@" in authority else authority
    return f"{scheme}{separator}{shown}{slash}{path}"[:200]
