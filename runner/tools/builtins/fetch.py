"""Built-in ``fetch_url``: GET a public web page under the agent's network policy."""

from __future__ import annotations

from html.parser import HTMLParser
from typing import Annotated, ClassVar

from pydantic import Field

from runner.tools.base import ToolContext, ToolResult, tool
from runner.tools.net import fetch


@tool
async def fetch_url(
    ctx: ToolContext, url: str, max_chars: Annotated[int, Field(ge=100, le=200_000)] = 20_000
) -> ToolResult:
    """Fetch a web page or file over http(s) and return its text (HTML is reduced to text).

    Only public addresses are reachable; redirects are followed (at most 5).

    Args:
        url: The http:// or https:// URL to fetch.
        max_chars: Return at most this many characters of text.
    """
    response = await fetch(url, ctx.network)
    text = response.text()
    if b"\0" in response.body[:4096]:
        text = f"[binary content of {len(response.body)} bytes not shown]"
    elif response.content_type in ("text/html", "application/xhtml+xml"):
        text = html_to_text(text)
    shown = text[:max_chars]
    notes = []
    if response.truncated:
        notes.append(f"[body cut at {ctx.network.max_bytes} bytes]")
    if len(text) > max_chars:
        notes.append(f"[showing {max_chars} of {len(text)} characters]")
    header = f"URL: {response.url}\nstatus: {response.status}\ncontent-type: {response.content_type}"
    content = "\n".join([header, "", shown, *notes])
    data = {
        "url": response.url,
        "status": response.status,
        "content_type": response.content_type,
        "text": shown,
        "truncated": response.truncated or len(text) > max_chars,
    }
    return ToolResult(content=content, data=data)


class _TextExtractor(HTMLParser):
    _SKIP: ClassVar[frozenset[str]] = frozenset({"script", "style", "noscript", "template", "svg"})
    _BLOCK: ClassVar[frozenset[str]] = frozenset(
        {"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "section", "article"}
    )

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._skipping = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self._SKIP:
            self._skipping += 1
        elif tag in self._BLOCK:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in self._SKIP and self._skipping:
            self._skipping -= 1

    def handle_data(self, data: str) -> None:
        if not self._skipping:
            self.parts.append(data)


def html_to_text(html: str) -> str:
    """Visible text of an HTML document, whitespace collapsed per line."""
    extractor = _TextExtractor()
    extractor.feed(html)
    extractor.close()
    lines = (" ".join(line.split()) for line in "".join(extractor.parts).splitlines())
    return "\n".join(line for line in lines if line)
