"""Built-in ``web_search``: ask the search provider an agent declares, under its network policy.

The provider, its URL and the *name* of the variable holding its key come from the agent's
YAML (``tools: [{name: web_search, settings: {provider: brave, api_key_env: BRAVE_API_KEY}}]``);
the key is read from the environment when the call is made, sent only to the provider's own
origin (no redirects are followed) and redacted from everything recorded.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Annotated, Any

from pydantic import Field

from runner import untrusted_json
from runner.core.sources import Source
from runner.errors import ToolFailure
from runner.tools.base import ToolContext, ToolResult, tool
from runner.tools.net import fetch
from runner.tools.search_providers import DEFAULT_URLS, PROVIDERS, SearchHit, build_request, parse_response
from runner.tools.settings import WEB_SEARCH_SETTINGS

MAX_RESPONSE_BYTES = 2_000_000



@tool(settings_schema=WEB_SEARCH_SETTINGS)
async def web_search(
    ctx: ToolContext,
    query: Annotated[str, Field(min_length=1, max_length=400)],
    max_results: Annotated[int, Field(ge=1, le=20)] = 5,
) -> ToolResult:
    """Search the web and return the top results: title, URL, a snippet and a date when known.

    Open a result with browse or fetch_url to read it in full.

    Args:
        query: What to search for, as you would type it into a search engine.
        max_results: How many results to return (the agent's settings may allow fewer).
    """
    settings = ctx.settings_for("web_search")
    provider = str(settings.get("provider", ""))
    if provider not in PROVIDERS:
        raise ToolFailure("web_search is not configured: give it settings with a provider (" + ", ".join(PROVIDERS) + ")")
    url = str(settings.get("url") or DEFAULT_URLS.get(provider, ""))
    limit = min(max_results, int(settings.get("max_results", 5)))
    request = build_request(provider, url, query, limit, _key(settings))
    policy = replace(
        ctx.network, max_redirects=0, max_bytes=min(ctx.network.max_bytes, MAX_RESPONSE_BYTES),
        timeout_seconds=float(settings.get("timeout_seconds", ctx.network.timeout_seconds)),
    )  # fmt: skip
    response = await fetch(
        request.url, policy, method=request.method, headers=request.headers, params=request.params,
        json_body=request.json_body,
    )  # fmt: skip
    if response.status != 200:
        excerpt = " ".join(response.text()[:300].split())
        raise ToolFailure(f"{provider} search failed: HTTP {response.status} from {url}: {excerpt}")
    try:
        payload = untrusted_json.loads(response.text())
    except ValueError:
        raise ToolFailure(f"{provider} search at {url} did not answer with JSON ({response.content_type})") from None
    hits = parse_response(provider, payload, limit)
    return ToolResult(
        content=_render(query, provider, hits),
        data={"query": query, "provider": provider, "results": [hit.as_dict() for hit in hits]},
        sources=tuple(Source("web", hit.url, title=hit.title, position=hit.date) for hit in hits),
    )


def _key(settings: Any) -> str | None:
    name = settings.get("api_key_env")
    if not name:
        return None
    key = os.environ.get(str(name), "")
    if not key:
        raise ToolFailure(f"web_search needs an API key: the environment variable {name} is not set")
    return key


def _render(query: str, provider: str, hits: list[SearchHit]) -> str:
    if not hits:
        return f'No results for "{query}" ({provider}).'
    lines = [f'{len(hits)} results for "{query}" ({provider}):']
    for number, hit in enumerate(hits, 1):
        lines.append(f"{number}. {hit.title}\n   {hit.url}" + (f"\n   date: {hit.date}" if hit.date else ""))
        if hit.snippet:
            lines.append(f"   {hit.snippet}")
    return "\n".join(lines)
