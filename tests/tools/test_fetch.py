"""fetch_url and the network policy: public addresses only, re-checked on every redirect."""

from __future__ import annotations

import dataclasses

import pytest

from runner.errors import ToolFailure
from runner.tools.net import NetworkPolicy, check_destination, fetch

from .conftest import LoopbackServer, Route

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1/",
        "http://localhost/",
        "http://[::1]/",
        "http://10.0.0.1/",
        "http://192.168.1.1/",
        "http://172.16.0.1/",
        "http://169.254.169.254/latest/meta-data/",
        "http://100.64.0.1/",
        "http://0.0.0.0/",
        "http://224.0.0.1/",
        "http://240.0.0.1/",
        "http://[::ffff:127.0.0.1]/",
        "http://[fe80::1]/",
        "http://[fc00::1]/",
        "http://[64:ff9b::7f00:1]/",
        "http://2130706433/",
    ],
)
async def test_non_public_addresses_are_refused(url):
    with pytest.raises(ToolFailure, match="refused"):
        await check_destination(url, NetworkPolicy())


@pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://example.com/x", "gopher://example.com/", "data:,hi"])
async def test_non_http_schemes_are_refused(url):
    with pytest.raises(ToolFailure, match="only http and https"):
        await check_destination(url, NetworkPolicy())


async def test_credentials_in_urls_are_refused():
    with pytest.raises(ToolFailure, match="credentials"):
        await check_destination("http://user:pw@example.com/", NetworkPolicy())


async def test_loopback_server_is_refused_by_default(registry, ctx, http_server: LoopbackServer):
    http_server.routes["/"] = Route(body=b"hello")
    with pytest.raises(ToolFailure, match="not a public address"):
        await registry.invoke("fetch_url", {"url": http_server.url("/")}, ctx)
    assert http_server.requests == []


async def test_fetch_url_happy_path_reduces_html_to_text(registry, make_ctx, http_server: LoopbackServer):
    page = b"<html><head><style>x{}</style><script>evil()</script></head><body><h1>Title</h1><p>Body text</p></body></html>"
    http_server.routes["/page"] = Route(headers={"Content-Type": "text/html; charset=utf-8"}, body=page)
    ctx = make_ctx(network=http_server.policy)
    result = await registry.invoke("fetch_url", {"url": http_server.url("/page")}, ctx)
    assert "Title\nBody text" in result.content
    assert "evil" not in result.content
    assert result.data["status"] == 200


async def test_binary_bodies_are_not_dumped_into_the_context(registry, make_ctx, http_server: LoopbackServer):
    http_server.routes["/img"] = Route(headers={"Content-Type": "image/png"}, body=b"\x89PNG\r\n\x1a\n\0\0\0")
    result = await registry.invoke("fetch_url", {"url": http_server.url("/img")}, make_ctx(network=http_server.policy))
    assert "[binary content of 11 bytes not shown]" in result.content


async def test_redirects_are_followed_and_rechecked(http_server: LoopbackServer):
    http_server.routes["/a"] = Route(302, {"Location": "/b"})
    http_server.routes["/b"] = Route(body=b"final")
    response = await fetch(http_server.url("/a"), http_server.policy)
    assert response.body == b"final"
    assert response.url.endswith("/b")


@pytest.mark.parametrize(
    "location", ["http://127.0.0.2:{port}/x", "http://169.254.169.254/latest/meta-data/", "http://10.1.2.3/"]
)
async def test_redirect_to_a_private_address_is_refused(http_server: LoopbackServer, location):
    http_server.routes["/go"] = Route(302, {"Location": location.format(port=http_server.port)})
    with pytest.raises(ToolFailure, match="not a public address"):
        await fetch(http_server.url("/go"), http_server.policy)


async def test_redirect_to_another_scheme_is_refused(http_server: LoopbackServer):
    http_server.routes["/go"] = Route(301, {"Location": "file:///etc/passwd"})
    with pytest.raises(ToolFailure, match="only http and https"):
        await fetch(http_server.url("/go"), http_server.policy)


async def test_redirect_loops_stop_after_the_limit(http_server: LoopbackServer):
    http_server.routes["/loop"] = Route(302, {"Location": "/loop"})
    with pytest.raises(ToolFailure, match="too many redirects"):
        await fetch(http_server.url("/loop"), http_server.policy)
    assert len(http_server.requests) == http_server.policy.max_redirects + 1


async def test_body_is_cut_at_the_size_cap(http_server: LoopbackServer):
    http_server.routes["/big"] = Route(body=b"x" * 5_000_000)
    policy = dataclasses.replace(http_server.policy, max_bytes=10_000)
    response = await fetch(http_server.url("/big"), policy)
    assert response.truncated
    assert len(response.body) == 10_000


async def test_allow_and_deny_host_lists(http_server: LoopbackServer):
    http_server.routes["/"] = Route(body=b"ok")
    denied = dataclasses.replace(http_server.policy, deny_hosts=("127.0.0.*",))
    with pytest.raises(ToolFailure, match="deny_hosts"):
        await fetch(http_server.url("/"), denied)
    not_allowed = dataclasses.replace(http_server.policy, allow_hosts=("*.example.com",))
    with pytest.raises(ToolFailure, match="allow_hosts"):
        await fetch(http_server.url("/"), not_allowed)
    allowed = dataclasses.replace(http_server.policy, allow_hosts=("127.0.0.1",))
    assert (await fetch(http_server.url("/"), allowed)).body == b"ok"


async def test_runner_credentials_and_proxies_are_not_used(http_server: LoopbackServer, monkeypatch, tmp_path):
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("ALL_PROXY", "http://127.0.0.1:9")
    netrc = tmp_path / "netrc"
    netrc.write_text("machine 127.0.0.1 login runner password sk-netrc-secret\n")
    monkeypatch.setenv("NETRC", str(netrc))
    http_server.routes["/"] = Route(body=b"ok")
    assert (await fetch(http_server.url("/"), http_server.policy)).body == b"ok"
    headers = {k.lower() for k in http_server.requests[0]["headers"]}
    assert "authorization" not in headers and "proxy-authorization" not in headers


async def test_slow_server_hits_the_time_cap(http_server: LoopbackServer):
    import time

    def slow(_handler: object) -> bytes:
        time.sleep(3)
        return b"late"

    http_server.routes["/slow"] = Route(body=slow)
    policy = dataclasses.replace(http_server.policy, timeout_seconds=0.5)
    with pytest.raises(ToolFailure, match="longer than"):
        await fetch(http_server.url("/slow"), policy)
