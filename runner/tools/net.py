"""Outbound HTTP for tools: public addresses only, re-checked on every redirect.

Every request (the first and each redirect, followed here by hand) goes through
:func:`check_destination`: http/https only, no credentials in the URL, the agent's
``allow_hosts``/``deny_hosts`` globs, and every address the host resolves to must be
public (no loopback, private, link-local such as 169.254.169.254, multicast, reserved or
unspecified). The connection is then made to the checked address itself (the Host header
and TLS SNI keep the name), so a second DNS answer cannot swap in a private address.
The client ignores the environment (no proxies, no netrc): the runner's credentials are
never sent. The body is read in chunks and cut at ``max_bytes``; the whole exchange has
a deadline.
"""

from __future__ import annotations

import asyncio
import fnmatch
import ipaddress
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import SplitResult, urljoin, urlsplit, urlunsplit

from runner.errors import ToolFailure

_REDIRECTS = {301, 302, 303, 307, 308}
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclass(frozen=True)
class NetworkPolicy:
    """Where URL tools may connect, and how much they may read.

    ``allow_hosts`` (empty: any public host) and ``deny_hosts`` are glob patterns on the
    host name. ``allow_private_networks``: CIDRs exempted from the public-address rule, only
    as an agent's YAML lists them explicitly (``network.allow_private_networks``: a
    self-hosted search engine on the LAN, a loopback test server); empty by default.
    """

    allow_hosts: tuple[str, ...] = ()
    deny_hosts: tuple[str, ...] = ()
    max_bytes: int = 2_000_000
    timeout_seconds: float = 30.0
    max_redirects: int = 5
    allow_private_networks: tuple[str, ...] = field(default=(), repr=False)


@dataclass(frozen=True)
class HttpResponse:
    """A response read under the policy's caps."""

    url: str
    status: int
    headers: dict[str, str]
    body: bytes
    truncated: bool

    @property
    def content_type(self) -> str:
        """The media type without parameters (``text/html``)."""
        return self.headers.get("content-type", "").split(";")[0].strip().lower()

    def text(self) -> str:
        """The body decoded with the declared charset (UTF-8 otherwise), errors replaced."""
        charset = "utf-8"
        for param in self.headers.get("content-type", "").split(";")[1:]:
            key, _, value = param.partition("=")
            if key.strip().lower() == "charset" and value.strip():
                charset = value.strip().strip('"')
        try:
            return self.body.decode(charset, "replace")
        except LookupError:
            return self.body.decode("utf-8", "replace")


@dataclass(frozen=True)
class Destination:
    """A checked URL and the public address to connect to."""

    url: str
    host: str
    address: IPAddress


async def fetch(
    url: str,
    policy: NetworkPolicy,
    *,
    method: str = "GET",
    headers: Mapping[str, str] | None = None,
    params: Mapping[str, Any] | None = None,
    json_body: Any = None,
    content: bytes | None = None,
    follow_redirects: bool = True,
) -> HttpResponse:
    """Make one request under ``policy``, following up to ``max_redirects`` redirects
    (``follow_redirects=False``: a redirect is returned as it came, for a caller that checks
    its next hop itself, as the browser's proxy does). ``json_body`` or raw ``content`` is the
    request body.

    Raises :class:`~runner.errors.ToolFailure` for refused destinations, too many
    redirects, the deadline and transport errors.
    """
    try:
        async with asyncio.timeout(policy.timeout_seconds):
            return await _fetch(url, policy, method, dict(headers or {}), params, json_body, content, follow_redirects)
    except TimeoutError:
        raise ToolFailure(f"request to {url} took longer than {policy.timeout_seconds:g}s") from None


async def _fetch(
    url: str,
    policy: NetworkPolicy,
    method: str,
    headers: dict[str, str],
    params: Mapping[str, Any] | None,
    json_body: Any,
    content: bytes | None = None,
    follow_redirects: bool = True,
) -> HttpResponse:
    httpx = _httpx()
    async with httpx.AsyncClient(trust_env=False, follow_redirects=False, timeout=None) as client:
        for _ in range(policy.max_redirects + 1):
            destination = await check_destination(url, policy)
            request = client.build_request(
                method, _pinned_url(destination), headers=_request_headers(destination, headers),
                params=params, json=json_body, content=content,
                extensions={"sni_hostname": destination.host},
            )  # fmt: skip
            try:
                response = await client.send(request, stream=True)
            except httpx.HTTPError as error:
                raise ToolFailure(f"request to {url} failed: {error}") from None
            try:
                if follow_redirects and response.status_code in _REDIRECTS and "location" in response.headers:
                    next_url = _joined(url, response.headers["location"])
                    headers = _headers_for_redirect(url, next_url, headers)
                    if response.status_code in (301, 302, 303) and method != "HEAD":
                        method, params, json_body, content = "GET", None, None, None
                    url = next_url
                    continue
                body, truncated = await _read_capped(response, policy.max_bytes)
                return HttpResponse(url, response.status_code, dict(response.headers), body, truncated)
            finally:
                await response.aclose()
    raise ToolFailure(f"too many redirects (more than {policy.max_redirects}) starting from {url}")


def _httpx() -> Any:
    """The HTTP client module, imported on first use (httpx2, or httpx with the same API)."""
    try:
        import httpx2 as httpx
    except ImportError:  # pragma: no cover - depends on the environment
        import httpx  # type: ignore[no-redef]
    return httpx


async def check_destination(url: str, policy: NetworkPolicy) -> Destination:
    """Refuse ``url`` unless it is http(s) to an allowed host with only public addresses."""
    parts = _split(url)
    if parts.scheme not in ("http", "https"):
        raise ToolFailure(f"refused: only http and https URLs are allowed, not '{parts.scheme}:'")
    if parts.username is not None or parts.password is not None:
        raise ToolFailure("refused: URLs with credentials (user:password@) are not allowed")
    host = (parts.hostname or "").rstrip(".").lower()
    if not host:
        raise ToolFailure(f"refused: '{url}' has no host")
    _check_host_lists(host, policy)
    addresses = await _resolve(host, _port(parts) or (443 if parts.scheme == "https" else 80))
    for address in addresses:
        if not _is_public(address) and not _exempt(address, policy):
            raise ToolFailure(
                f"refused: {host} resolves to {address}, which is not a public address "
                "(loopback, private, link-local, multicast and reserved ranges are blocked)"
            )
    return Destination(url=url, host=host, address=addresses[0])


def _split(url: str) -> SplitResult:
    """``url``'s parts; a URL Python cannot parse (``http://[::1``) is refused, not raised."""
    try:
        return urlsplit(url)
    except ValueError as error:
        raise ToolFailure(f"refused: '{url[:200]}' is not a valid URL ({error})") from None


def _port(parts: SplitResult) -> int | None:
    """The URL's port; one out of range or not a number (``:99999``, ``:-1``) is refused."""
    try:
        return parts.port
    except ValueError as error:
        raise ToolFailure(f"refused: '{parts.geturl()[:200]}' has an invalid port ({error})") from None


def _joined(base: str, location: str) -> str:
    """Where a redirect's ``Location`` leads; one that is not a URL ends the request."""
    try:
        return urljoin(base, location)
    except ValueError as error:
        raise ToolFailure(f"{base[:200]} redirected to an invalid URL ({error})") from None


def _check_host_lists(host: str, policy: NetworkPolicy) -> None:
    if any(fnmatch.fnmatchcase(host, pattern.lower()) for pattern in policy.deny_hosts):
        raise ToolFailure(f"refused: host {host} is in this agent's deny_hosts")
    if policy.allow_hosts and not any(fnmatch.fnmatchcase(host, pattern.lower()) for pattern in policy.allow_hosts):
        raise ToolFailure(f"refused: host {host} is not in this agent's allow_hosts ({', '.join(policy.allow_hosts)})")


async def _resolve(host: str, port: int) -> list[IPAddress]:
    try:
        return [ipaddress.ip_address(host)]
    except ValueError:
        pass
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as error:
        raise ToolFailure(f"cannot resolve {host}: {error.strerror}") from None
    addresses = [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos]
    if not addresses:
        raise ToolFailure(f"cannot resolve {host}: no addresses")
    return addresses


def _is_public(address: IPAddress) -> bool:
    if isinstance(address, ipaddress.IPv6Address):
        embedded = address.ipv4_mapped or address.sixtofour
        if embedded is None and address in _NAT64:
            embedded = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if embedded is not None and not _is_public(embedded):
            return False
    return address.is_global and not (
        address.is_multicast or address.is_private or address.is_loopback
        or address.is_link_local or address.is_reserved or address.is_unspecified
    )  # fmt: skip


def _exempt(address: IPAddress, policy: NetworkPolicy) -> bool:
    return any(address in ipaddress.ip_network(network, strict=False) for network in policy.allow_private_networks)


def _pinned_url(destination: Destination) -> str:
    parts = urlsplit(destination.url)
    address = destination.address
    host = f"[{address}]" if address.version == 6 else str(address)
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path or "/", parts.query, ""))


def _request_headers(destination: Destination, headers: dict[str, str]) -> dict[str, str]:
    parts = urlsplit(destination.url)
    host = f"[{destination.host}]" if ":" in destination.host else destination.host
    merged = {"accept-encoding": "identity", **{k.lower(): v for k, v in headers.items()}}
    merged["host"] = f"{host}:{parts.port}" if parts.port else host
    return merged


CREDENTIAL_HEADERS = frozenset(
    {"authorization", "proxy-authorization", "cookie", "api-key", "x-api-key", "x-subscription-token"}
)
"""Headers that carry credentials (search APIs use their own names): never sent to another origin."""


def _headers_for_redirect(old: str, new: str, headers: dict[str, str]) -> dict[str, str]:
    """Drop credentials when a redirect leaves the original origin."""
    old_parts, new_parts = urlsplit(old), urlsplit(new)
    same_origin = (old_parts.scheme, old_parts.netloc) == (new_parts.scheme, new_parts.netloc)
    if same_origin:
        return headers
    return {k: v for k, v in headers.items() if k.lower() not in CREDENTIAL_HEADERS}


async def _read_capped(response: Any, max_bytes: int) -> tuple[bytes, bool]:
    body = bytearray()
    async for chunk in response.aiter_bytes():
        room = max_bytes - len(body)
        if len(chunk) > room:
            body.extend(chunk[:room])
            return bytes(body), True
        body.extend(chunk)
    return bytes(body), False
