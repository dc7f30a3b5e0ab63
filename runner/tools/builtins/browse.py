"""Built-in ``browse``: open a page in a real headless browser (JavaScript runs), click and
fill by CSS selector, and read the page's main text and links; optionally a screenshot,
kept as a report artifact. See :mod:`runner.tools.browser` for how every request the page
makes is held to the agent's network policy.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from runner.core.sources import Source
from runner.errors import ToolFailure
from runner.tools.base import ToolContext, ToolResult, tool
from runner.tools.browser import BrowseLimits, BrowserTab
from runner.tools.net import check_destination
from runner.tools.paths import write_workspace_file
from runner.tools.settings import BROWSE_SETTINGS

MAX_LINKS = 40


class Action(BaseModel):
    """One thing to do on the page, in order."""

    model_config = ConfigDict(extra="forbid")

    action: Literal["click", "fill", "press", "wait_for"] = Field(description="click, fill (type value into a field), press (a key such as Enter), wait_for (an element to appear).")
    selector: str = Field(min_length=1, max_length=500, description="CSS selector of the element, e.g. 'button#search' or 'input[name=q]'.")
    value: str | None = Field(default=None, max_length=10000, description="The text to fill, or the key to press.")


@tool(settings_schema=BROWSE_SETTINGS)
async def browse(
    ctx: ToolContext,
    url: str | None = None,
    actions: Annotated[list[Action], Field(max_length=20)] = [],  # noqa: B006 - pydantic copies defaults
    screenshot: bool = False,
    max_chars: Annotated[int, Field(ge=200, le=100_000)] = 8000,
) -> ToolResult:
    """Open a web page in a headless browser (JavaScript runs) and read its main text and
    links. Then click, fill in or press keys by CSS selector; later calls act on the same page.

    Args:
        url: The http(s) URL to open. Leave it out to keep acting on the current page.
        actions: What to do on the page after it opens, in order.
        screenshot: Also save a screenshot of the page (a report artifact).
        max_chars: Return at most this many characters of text.
    """
    tab: BrowserTab | None = ctx.browser
    if tab is None:
        raise ToolFailure("the browser is not available here (only agent steps can browse)")
    limits = _limits(ctx.settings_for("browse"))
    budget = _budget(tab, limits, ctx.deadline)
    started = time.monotonic()
    tab.deadline = started + budget
    tab.new_page_load(limits)
    try:
        async with asyncio.timeout(budget + 5):  # a backstop: every wait below is bounded by the budget
            return await _visit(ctx, tab, url, actions, screenshot, max_chars, limits)
    except TimeoutError:
        await tab.discard_page()
        raise ToolFailure(f"browse took longer than its {budget:g} s; the page may never finish loading") from None
    finally:
        tab.browser.seconds_used += time.monotonic() - started


async def _visit(
    ctx: ToolContext, tab: BrowserTab, url: str | None, actions: list[Action], screenshot: bool, max_chars: int, limits: BrowseLimits
) -> ToolResult:
    page = await tab.open(ctx.network)
    notes: list[str] = []
    if url is not None:
        await check_destination(url, ctx.network)
        await _navigate(page, url, tab)
    elif page.url == "about:blank":
        raise ToolFailure("no page is open yet: give a url")
    for number, action in enumerate(actions, 1):
        await _act(page, action, number, tab)
    if not await _settle(page, tab, limits):
        notes.append(f"the page was still loading after {limits.settle_seconds:g} s; showing what had rendered")
    return await _snapshot(ctx, tab, page, screenshot, max_chars, notes)


async def _navigate(page: Any, url: str, tab: BrowserTab) -> None:
    from playwright.async_api import Error

    try:
        await page.goto(url, wait_until="domcontentloaded", timeout=_ms(tab, extra=1.0))
    except Error as error:
        await tab.discard_page()
        refused = "; ".join(tab.load.refused[-3:])
        raise ToolFailure(f"could not open {url}: {_first_line(error)}" + (f" ({refused})" if refused else "")) from None


async def _act(page: Any, action: Action, number: int, tab: BrowserTab) -> None:
    from playwright.async_api import Error

    timeout = _ms(tab)
    try:
        if action.action == "click":
            await page.click(action.selector, timeout=timeout)
        elif action.action == "fill":
            await page.fill(action.selector, action.value or "", timeout=timeout)
        elif action.action == "press":
            await page.press(action.selector, action.value or "Enter", timeout=timeout)
        else:
            await page.wait_for_selector(action.selector, timeout=timeout)
    except Error as error:
        raise ToolFailure(f"action {number} ({action.action} '{action.selector}') failed: {_first_line(error)}") from None


async def _settle(page: Any, tab: BrowserTab, limits: BrowseLimits) -> bool:
    """Let the page finish loading, within the settle time; False when it did not."""
    from playwright.async_api import Error

    wait = min(limits.settle_seconds, max(tab.deadline - time.monotonic() - 1.0, 0.0))
    try:
        await page.wait_for_load_state("load", timeout=wait * 1000 or 1)
        with contextlib.suppress(Error):  # a page that polls forever is never idle: fine
            await page.wait_for_load_state("networkidle", timeout=max(wait * 500, 1))
    except Error:
        return False
    return True


async def _snapshot(ctx: ToolContext, tab: BrowserTab, page: Any, screenshot: bool, max_chars: int, notes: list[str]) -> ToolResult:
    html, title = await page.content(), await page.title()
    url = tab.final_urls.get(page.url, page.url)  # after redirects the runner followed
    text = await asyncio.to_thread(_readable_text, html) or await page.inner_text("body", timeout=_ms(tab))
    links = await page.eval_on_selector_all("a[href]", "els => els.slice(0, 400).map(e => [e.href, (e.innerText || '').trim()])")
    links = _links(links)
    artifacts = [await _screenshot(ctx, tab, page)] if screenshot else []
    refused = list(dict.fromkeys(tab.load.refused))
    if refused:
        notes.append(f"{len(refused)} request(s) refused by the network policy: " + "; ".join(refused[:5]))
    shown = text[:max_chars]
    if len(text) > max_chars:
        notes.append(f"showing {max_chars} of {len(text)} characters")
    lines = [f"URL: {url}", f"title: {title}", *(f"[{note}]" for note in notes), "", shown]
    if links:
        lines += ["", "Links:", *(f"- {label or '(no text)'} — {href}" for href, label in links)]
    data = {"url": url, "title": title, "text": shown, "links": [{"url": h, "text": t} for h, t in links],
            "refused": refused, "screenshot": artifacts[0] if artifacts else None}  # fmt: skip
    return ToolResult("\n".join(lines), artifacts=artifacts, data=data, sources=(Source("web", url, title=title),))


async def _screenshot(ctx: ToolContext, tab: BrowserTab, page: Any) -> str:
    tab.screenshots += 1
    path = f"screenshots/{tab.step_id}-{tab.screenshots}.png"
    png = await page.screenshot(timeout=_ms(tab), full_page=False)
    await asyncio.to_thread(write_workspace_file, ctx.workspace, path, png, quota_bytes=ctx.disk_quota_bytes)
    return path


def _readable_text(html: str) -> str:
    """The page's main text as Markdown (trafilatura drops navigation and boilerplate)."""
    import trafilatura

    return str(trafilatura.extract(html, output_format="markdown", include_links=False, include_tables=True, favor_recall=True) or "")


def _links(raw: list[list[str]]) -> list[tuple[str, str]]:
    seen: dict[str, str] = {}
    for href, label in raw:
        if href.startswith(("http://", "https://")) and href not in seen:
            seen[href] = " ".join(label.split())[:100]
    return list(seen.items())[:MAX_LINKS]


def _limits(settings: Any) -> BrowseLimits:
    defaults = BrowseLimits()
    return BrowseLimits(
        call_seconds=float(settings.get("timeout_seconds", defaults.call_seconds)),
        run_seconds=float(settings.get("max_run_seconds", defaults.run_seconds)),
        page_bytes=int(settings.get("max_page_bytes", defaults.page_bytes)),
        settle_seconds=float(settings.get("settle_seconds", defaults.settle_seconds)),
    )


def _budget(tab: BrowserTab, limits: BrowseLimits, deadline: float | None) -> float:
    """Seconds this call may take: the per-call limit, what is left of the run's browsing time
    and of the run's wall-clock cap, whichever is least."""
    left = limits.run_seconds - tab.browser.seconds_used
    if left <= 0:
        raise ToolFailure(f"browse has used its {limits.run_seconds:g} s for this run (max_run_seconds)")
    budget = min(limits.call_seconds, left)
    if deadline is not None:
        budget = min(budget, deadline - time.monotonic())
    if budget <= 0:
        raise ToolFailure("no time is left in this run to browse")
    return budget


def _ms(tab: BrowserTab, extra: float = 0.0) -> float:
    return max((tab.deadline - time.monotonic() + extra) * 1000, 1.0)


def _first_line(error: Exception) -> str:
    return str(error).strip().splitlines()[0][:300] if str(error).strip() else type(error).__name__
