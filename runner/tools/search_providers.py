"""Web search providers: how to ask each one, and how to read its answer.

Each provider turns a query into one HTTP request and its JSON response into
:class:`SearchHit` values (title, URL, snippet, date). The formats are the providers' own:

- ``searxng``: a SearxNG instance's JSON API (``GET /search?q=...&format=json``; the
  instance must enable the ``json`` format), answering ``{"results": [{"title", "url",
  "content", "publishedDate"}]}``. Self-hostable; no key unless a proxy in front wants one.
- ``brave``: the Brave Search API (``GET https://api.search.brave.com/res/v1/web/search``,
  key in ``X-Subscription-Token``), answering ``{"web": {"results": [{"title", "url",
  "description", "page_age", "age"}]}}``.
- ``tavily``: the Tavily API (``POST https://api.tavily.com/search``, key as a bearer
  token), answering ``{"results": [{"title", "url", "content", "published_date"}]}``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from typing import Any

from runner.errors import ToolFailure
from runner.tools.settings import SEARCH_PROVIDERS as PROVIDERS

DEFAULT_URLS = {
    "brave": "https://api.search.brave.com/res/v1/web/search",
    "tavily": "https://api.tavily.com/search",
}
MAX_SNIPPET_CHARS = 500
_TAG = re.compile(r"<[^>]{0,200}>")
_ISO_DATE = re.compile(r"^(\d{4}-\d{2}-\d{2})")


@dataclass(frozen=True)
class SearchHit:
    """One search result as the tool returns it."""

    title: str
    url: str
    snippet: str
    date: str = ""

    def as_dict(self) -> dict[str, str]:
        return {"title": self.title, "url": self.url, "snippet": self.snippet, "date": self.date}


@dataclass(frozen=True)
class SearchRequest:
    """One HTTP request to a provider."""

    method: str
    url: str
    params: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    json_body: dict[str, Any] | None = None


def build_request(provider: str, url: str, query: str, count: int, key: str | None) -> SearchRequest:
    """The request that asks ``provider`` at ``url`` for ``count`` results for ``query``."""
    accept = {"accept": "application/json"}
    if provider == "searxng":
        headers = accept | ({"authorization": f"Bearer {key}"} if key else {})
        return SearchRequest("GET", url, {"q": query, "format": "json", "pageno": 1}, headers)
    if provider == "brave":
        return SearchRequest("GET", url, {"q": query, "count": count}, accept | {"x-subscription-token": key or ""})
    if provider == "tavily":
        body = {"query": query, "max_results": count, "search_depth": "basic"}
        return SearchRequest("POST", url, {}, accept | {"authorization": f"Bearer {key or ''}"}, body)
    raise ToolFailure(f"unknown search provider '{provider}'; use one of {', '.join(PROVIDERS)}")


def parse_response(provider: str, payload: Any, limit: int) -> list[SearchHit]:
    """The first ``limit`` usable hits of a provider's JSON answer (items without a URL are
    skipped; a payload of the wrong shape is a failure naming the provider)."""
    items = _PARSERS[provider](payload)
    hits: list[SearchHit] = []
    for item in items:
        if not isinstance(item, Mapping):
            continue
        hit = _hit(item, provider)
        if hit is not None:
            hits.append(hit)
        if len(hits) >= limit:
            break
    return hits


def _searxng_items(payload: Any) -> list[Any]:
    return _list_at(payload, ("results",), "searxng")


def _brave_items(payload: Any) -> list[Any]:
    if isinstance(payload, Mapping) and "web" not in payload and payload.get("type") == "search":
        return []  # Brave answers without a "web" section when nothing matched
    return _list_at(payload, ("web", "results"), "brave")


def _tavily_items(payload: Any) -> list[Any]:
    return _list_at(payload, ("results",), "tavily")


_PARSERS: dict[str, Callable[[Any], list[Any]]] = {
    "searxng": _searxng_items,
    "brave": _brave_items,
    "tavily": _tavily_items,
}
_SNIPPET_KEYS = {"searxng": ("content",), "brave": ("description",), "tavily": ("content",)}
_DATE_KEYS = {"searxng": ("publishedDate",), "brave": ("page_age", "age"), "tavily": ("published_date",)}


def _list_at(payload: Any, path: tuple[str, ...], provider: str) -> list[Any]:
    value = payload
    for key in path:
        if not isinstance(value, Mapping) or key not in value:
            raise ToolFailure(f"the {provider} response has no '{'.'.join(path)}' list; is the URL a {provider} search API?")
        value = value[key]
    if not isinstance(value, list):
        raise ToolFailure(f"the {provider} response's '{'.'.join(path)}' is not a list")
    return value


def _hit(item: Mapping[str, Any], provider: str) -> SearchHit | None:
    url = item.get("url")
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        return None
    snippet = next((item[k] for k in _SNIPPET_KEYS[provider] if isinstance(item.get(k), str)), "")
    date = next((item[k] for k in _DATE_KEYS[provider] if isinstance(item.get(k), str) and item[k]), "")
    return SearchHit(_plain(str(item.get("title") or url)), url, _plain(snippet)[:MAX_SNIPPET_CHARS], _date(date))


def _plain(text: str) -> str:
    """Text without HTML tags and entities (Brave marks matches with ``<strong>``), one line."""
    import html  # its entity table is 0.3 MiB: loaded when a search returns, not with every run

    return " ".join(html.unescape(_TAG.sub("", text)).split())


def _date(text: str) -> str:
    """An ISO date when the provider gave a timestamp (ISO 8601 or RFC 2822), else its own
    words (``3 days ago``)."""
    match = _ISO_DATE.match(text.strip())
    if match:
        return match.group(1)
    try:
        return parsedate_to_datetime(text).date().isoformat()
    except (TypeError, ValueError, IndexError):
        return " ".join(text.split())[:40]
