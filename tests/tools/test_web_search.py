"""web_search against a loopback server speaking each provider's real response format."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from urllib.parse import parse_qs, urlsplit

import pytest

from runner.errors import ToolFailure
from runner.tools.base import ToolContext
from runner.tools.net import NetworkPolicy
from runner.tools.registry import ToolRegistry
from tests.loopback_site import LoopbackSite, sample

pytestmark = pytest.mark.timeout(60)
KEY = "sk-search-secret-0123456789"
LOOPBACK = NetworkPolicy(allow_private_networks=("127.0.0.1/32",), timeout_seconds=10)


@pytest.fixture
def site() -> Iterator[LoopbackSite]:
    with LoopbackSite() as s:
        yield s


def search_ctx(make_ctx: Callable[..., ToolContext], settings: dict[str, object], network: NetworkPolicy = LOOPBACK) -> ToolContext:
    return make_ctx(network=network, settings={"web_search": settings}, secrets=(KEY,))


async def test_searxng_results_are_title_url_snippet_date_and_capped(registry: ToolRegistry, make_ctx, site: LoopbackSite):
    site.json("/search", sample("searxng"))
    ctx = search_ctx(make_ctx, {"provider": "searxng", "url": site.url("/search"), "max_results": 3})
    result = await registry.invoke("web_search", {"query": "heat pump market 2026", "max_results": 10}, ctx)
    (request,) = site.seen("/search")
    assert parse_qs(urlsplit(request.path).query) == {"q": ["heat pump market 2026"], "format": ["json"], "pageno": ["1"]}
    hits = result.data["results"]
    assert len(hits) == 3  # the settings' cap wins over the model's request
    assert hits[0] == {
        "title": "Heat pump sales rose 14% in Q3",
        "url": "https://www.example-energy.com/news/heat-pumps-q3",
        "snippet": "European heat pump sales rose 14% in the third quarter, led by Poland and Italy.",
        "date": "2026-10-02",
    }
    assert hits[1]["date"] == ""  # publishedDate null
    assert "1. Heat pump sales rose 14% in Q3\n   https://www.example-energy.com/news/heat-pumps-q3" in result.content
    assert [s.location for s in result.sources] == [h["url"] for h in hits]


async def test_results_without_an_http_url_are_skipped(registry: ToolRegistry, make_ctx, site: LoopbackSite):
    site.json("/search", sample("searxng"))
    ctx = search_ctx(make_ctx, {"provider": "searxng", "url": site.url("/search"), "max_results": 20})
    result = await registry.invoke("web_search", {"query": "q", "max_results": 20}, ctx)
    assert len(result.data["results"]) == 6
    assert "javascript:" not in result.content


async def test_brave_sends_its_key_in_its_header_and_strips_markup(registry, make_ctx, site, monkeypatch):
    monkeypatch.setenv("TEST_BRAVE_KEY", KEY)
    site.json("/res/v1/web/search", sample("brave"))
    ctx = search_ctx(make_ctx, {"provider": "brave", "url": site.url("/res/v1/web/search"), "api_key_env": "TEST_BRAVE_KEY"})
    result = await registry.invoke("web_search", {"query": "heat pump market 2026", "max_results": 4}, ctx)
    (request,) = site.seen("/res/v1/web/search")
    assert request.headers["x-subscription-token"] == KEY
    assert parse_qs(urlsplit(request.path).query) == {"q": ["heat pump market 2026"], "count": ["4"]}
    first, second = result.data["results"]
    assert first["snippet"] == "European heat pump sales rose 14% in the third quarter, led by Poland & Italy."
    assert first["date"] == "2026-10-02" and second["date"] == "3 days ago"
    assert KEY not in result.content and KEY not in json.dumps(result.data)


async def test_brave_with_no_web_section_means_no_results(registry, make_ctx, site, monkeypatch):
    monkeypatch.setenv("TEST_BRAVE_KEY", KEY)
    site.json("/b", {"type": "search", "query": {"original": "zzz"}, "mixed": {"main": []}})
    ctx = search_ctx(make_ctx, {"provider": "brave", "url": site.url("/b"), "api_key_env": "TEST_BRAVE_KEY"})
    result = await registry.invoke("web_search", {"query": "zzz"}, ctx)
    assert result.data["results"] == [] and "No results" in result.content


async def test_tavily_posts_json_with_a_bearer_key(registry, make_ctx, site, monkeypatch):
    monkeypatch.setenv("TEST_TAVILY_KEY", KEY)
    site.json("/search", sample("tavily"))
    ctx = search_ctx(make_ctx, {"provider": "tavily", "url": site.url("/search"), "api_key_env": "TEST_TAVILY_KEY"})
    result = await registry.invoke("web_search", {"query": "heat pump market 2026", "max_results": 2}, ctx)
    (request,) = site.seen("/search")
    assert request.method == "POST" and request.headers["authorization"] == f"Bearer {KEY}"
    body = json.loads(request.body)
    assert body["query"] == "heat pump market 2026" and body["max_results"] == 2
    assert [h["date"] for h in result.data["results"]] == ["2026-10-02", ""]


async def test_a_missing_key_variable_is_named(registry, make_ctx, site, monkeypatch):
    monkeypatch.delenv("TEST_BRAVE_KEY", raising=False)
    ctx = search_ctx(make_ctx, {"provider": "brave", "url": site.url("/b"), "api_key_env": "TEST_BRAVE_KEY"})
    with pytest.raises(ToolFailure, match="TEST_BRAVE_KEY is not set"):
        await registry.invoke("web_search", {"query": "q"}, ctx)
    assert site.requests == []


async def test_loopback_provider_is_refused_without_the_allow_list(registry, make_ctx, site):
    site.json("/search", sample("searxng"))
    ctx = search_ctx(make_ctx, {"provider": "searxng", "url": site.url("/search")}, network=NetworkPolicy())
    with pytest.raises(ToolFailure, match="not a public address"):
        await registry.invoke("web_search", {"query": "q"}, ctx)
    assert site.requests == []


async def test_allow_hosts_applies_to_the_provider(registry, make_ctx, site):
    policy = NetworkPolicy(allow_hosts=("search.example.org",), allow_private_networks=("127.0.0.1/32",))
    ctx = search_ctx(make_ctx, {"provider": "searxng", "url": site.url("/search")}, network=policy)
    with pytest.raises(ToolFailure, match="not in this agent's allow_hosts"):
        await registry.invoke("web_search", {"query": "q"}, ctx)
    assert site.requests == []


async def test_a_redirect_is_not_followed_so_the_key_stays_with_the_provider(registry, make_ctx, site, monkeypatch):
    monkeypatch.setenv("TEST_BRAVE_KEY", KEY)
    site.redirect("/b", site.url("/elsewhere"))
    site.json("/elsewhere", sample("brave"))
    ctx = search_ctx(make_ctx, {"provider": "brave", "url": site.url("/b"), "api_key_env": "TEST_BRAVE_KEY"})
    with pytest.raises(ToolFailure, match="redirect"):
        await registry.invoke("web_search", {"query": "q"}, ctx)
    assert site.seen("/elsewhere") == []


@pytest.mark.parametrize(
    ("status", "body", "message"),
    [
        (401, {"error": "invalid key"}, "HTTP 401"),
        (429, {"error": "rate limited"}, "HTTP 429"),
        (200, ["not", "an", "object"], "no 'results' list"),
        (200, {"results": "nope"}, "is not a list"),
    ],
)
async def test_provider_errors_and_wrong_shapes_fail_with_a_reason(registry, make_ctx, site, status, body, message):
    site.json("/search", body, status=status)
    ctx = search_ctx(make_ctx, {"provider": "searxng", "url": site.url("/search")})
    with pytest.raises(ToolFailure, match=message):
        await registry.invoke("web_search", {"query": "q"}, ctx)


async def test_a_provider_answering_html_is_not_json(registry, make_ctx, site):
    site.page("/search", "<html>SearxNG: format json is disabled</html>")
    ctx = search_ctx(make_ctx, {"provider": "searxng", "url": site.url("/search")})
    with pytest.raises(ToolFailure, match="did not answer with JSON"):
        await registry.invoke("web_search", {"query": "q"}, ctx)


async def test_an_unconfigured_web_search_says_how_to_configure_it(registry, make_ctx):
    with pytest.raises(ToolFailure, match="give it settings with a provider"):
        await registry.invoke("web_search", {"query": "q"}, make_ctx())


async def test_a_provider_echoing_the_key_has_it_redacted(registry, make_ctx, site, monkeypatch):
    monkeypatch.setenv("TEST_BRAVE_KEY", KEY)
    site.json("/b", {"error": f"subscription token {KEY} is not valid"}, status=401)
    ctx = search_ctx(make_ctx, {"provider": "brave", "url": site.url("/b"), "api_key_env": "TEST_BRAVE_KEY"})
    with pytest.raises(ToolFailure) as failure:
        await registry.invoke("web_search", {"query": "q"}, ctx)
    assert KEY not in str(failure.value) and "[REDACTED]" in str(failure.value)


@pytest.mark.parametrize("arguments", [{"query": ""}, {"query": "x" * 401}, {"query": "q", "max_results": 0}, {}])
async def test_bad_arguments_are_an_invalid_call(registry, make_ctx, site, arguments):
    from runner.errors import InvalidToolCall

    ctx = search_ctx(make_ctx, {"provider": "searxng", "url": site.url("/search")})
    with pytest.raises(InvalidToolCall):
        await registry.invoke("web_search", arguments, ctx)
    assert site.requests == []
