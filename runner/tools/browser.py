"""A headless browser for the ``browse`` tool: Playwright driving the system Chromium.

Nothing is downloaded: Chromium is Debian's (``/usr/bin/chromium``, or ``RUNNER_CHROMIUM``),
started headless with background networking, QUIC, sync and component updates off, and a
fresh profile per run (Playwright's temporary ``--user-data-dir``); as root it runs without
Chromium's own sandbox (``--no-sandbox``), which needs root's namespaces.

Every request the page makes goes through the agent's network policy: a route handler
catches each one it can (documents, scripts, images, ``fetch``), fetches it itself with
:func:`runner.tools.net.fetch` (http/https only, the agent's allow/deny lists, public
addresses only unless allow-listed, redirects followed here and re-checked at every hop,
the connection pinned to the checked address) and hands the response to the page, counting
bytes against the page's size cap. Refused requests are aborted and listed in the result.
WebSockets are closed and service workers blocked. What the route handler cannot see (a
SharedWorker's requests, downloads, prefetches) leaves only through the context's own
filtering proxy (:mod:`runner.tools.browser_proxy`, loopback included), which applies the
same policy, one hop at a time; the browser-wide proxy flag points at a port nothing listens
on, so a context without its proxy reaches nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from runner.errors import ConfigError, ToolFailure
from runner.tools.browser_proxy import Gate, PolicyProxy
from runner.tools.net import NetworkPolicy, fetch

DEFAULT_CHROMIUM = "/usr/bin/chromium"
FLAGS = (
    "--headless",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--dns-prefetch-disable",
    "--proxy-server=http://127.0.0.1:9",  # discard port: a request that escaped routing fails
    "--proxy-bypass-list=<-loopback>",  # ...loopback included
    "--force-webrtc-ip-handling-policy=disable_non_proxied_udp",
)
INSTALL_HINT = "the browse tool needs Playwright and Chromium: pip install 'runner[web]' and apt-get install chromium"
_HOP_HEADERS = frozenset({"connection", "keep-alive", "transfer-encoding", "content-encoding", "content-length", "host", "accept-encoding"})


@dataclass(frozen=True)
class BrowseLimits:
    """Time and size limits of ``browse`` (its settings)."""

    call_seconds: float = 30.0  # one call, navigation and actions included
    run_seconds: float = 300.0  # all calls of one run together
    page_bytes: int = 5_000_000  # everything one page loads
    settle_seconds: float = 2.0  # wait for scripts and late requests after the DOM is ready


@dataclass
class PageLoad:
    """What the requests of one page did: bytes fetched, requests refused and why."""

    limit: int
    used: int = 0
    refused: list[str] = field(default_factory=list)


class Browser:
    """One Chromium per run, started on first use; each agent step gets its own tab
    (its own browser context: cookies and storage are not shared between steps)."""

    def __init__(self, executable: str | None = None):
        self.executable = executable or os.environ.get("RUNNER_CHROMIUM", DEFAULT_CHROMIUM)
        self.seconds_used = 0.0
        self._playwright: Any = None
        self._browser: Any = None
        self._lock = asyncio.Lock()
        self._tabs: dict[str, BrowserTab] = {}

    async def __aenter__(self) -> Browser:
        return self

    def check_available(self) -> None:
        """Refuse (exit 2, before anything is spent) when Playwright or Chromium is missing."""
        if not Path(self.executable).is_file():
            raise ConfigError(f"no Chromium at {self.executable}; {INSTALL_HINT} (or set RUNNER_CHROMIUM)")
        try:
            import playwright.async_api  # noqa: F401 - only whether it imports
        except ImportError:
            raise ConfigError(INSTALL_HINT) from None

    async def __aexit__(self, *exc: object) -> None:
        for tab in self._tabs.values():
            await tab.close()
        if self._browser is not None:
            await self._browser.close()
        if self._playwright is not None:
            await self._playwright.stop()

    def tab(self, step_id: str, workspace: Path) -> BrowserTab:
        """The tab of one agent step (made on first use)."""
        if step_id not in self._tabs:
            self._tabs[step_id] = BrowserTab(self, step_id, workspace)
        return self._tabs[step_id]

    async def chromium(self) -> Any:
        """The running browser (launched on first call)."""
        async with self._lock:
            if self._browser is None:
                self._browser = await self._launch()
            return self._browser

    async def _launch(self) -> Any:
        if not Path(self.executable).is_file():
            raise ConfigError(f"no Chromium at {self.executable}; {INSTALL_HINT} (or set RUNNER_CHROMIUM)")
        try:
            from playwright.async_api import async_playwright
        except ImportError:
            raise ConfigError(INSTALL_HINT) from None
        self._playwright = await async_playwright().start()
        return await self._playwright.chromium.launch(
            executable_path=self.executable, headless=True, args=list(FLAGS), chromium_sandbox=os.geteuid() != 0,
        )  # fmt: skip


class BrowserTab:
    """One step's page: navigated, clicked and read by successive ``browse`` calls."""

    def __init__(self, browser: Browser, step_id: str, workspace: Path):
        self.browser, self.step_id, self.workspace = browser, step_id, workspace
        self.context: Any = None
        self.page: Any = None
        self.load = PageLoad(0)
        self.policy = NetworkPolicy()
        self.deadline = 0.0
        self.screenshots = 0
        self.final_urls: dict[str, str] = {}  # requested URL -> where the runner's redirects ended
        self.proxy: PolicyProxy | None = None

    async def close(self) -> None:
        if self.context is not None:
            await self.context.close()
        if self.proxy is not None:
            await self.proxy.close()

    def gate(self) -> Gate:
        """What the context's proxy applies now (the latest call's policy, page load and deadline)."""
        return Gate(self.policy, self.load, self.deadline)

    async def discard_page(self) -> None:
        """Drop the page after a failed or cut-off load (a navigation may still be pending on
        it); the next call opens a fresh page in the same context."""
        if self.page is not None:
            page, self.page = self.page, None
            with contextlib.suppress(Exception):  # closing a wedged page may itself fail: it is gone either way
                await asyncio.wait_for(page.close(), timeout=5)

    async def open(self, policy: NetworkPolicy) -> Any:
        """The page, with routing under ``policy`` (a new context on first use)."""
        self.policy = policy
        if self.context is None:
            chromium = await self.browser.chromium()
            self.proxy = await PolicyProxy(self.gate).start()
            self.context = await chromium.new_context(
                service_workers="block", accept_downloads=False, java_script_enabled=True,
                proxy={"server": self.proxy.url, "bypass": "<-loopback>"},  # loopback too goes through the proxy
            )  # fmt: skip
            await self.context.route("**/*", self._route)
            await self.context.route_web_socket("**/*", _close_socket)
        if self.page is None:
            self.page = await self.context.new_page()
        return self.page

    def new_page_load(self, limits: BrowseLimits) -> None:
        self.load = PageLoad(limits.page_bytes)

    async def _route(self, route: Any, request: Any) -> None:
        """Fetch one request of the page under the policy, or refuse it."""
        load = self.load
        remaining = self.deadline - time.monotonic()
        if remaining <= 0 or load.used >= load.limit:
            load.refused.append(f"{request.url}: " + ("out of time" if remaining <= 0 else f"page size cap of {load.limit} bytes reached"))
            await route.abort("blockedbyclient")
            return
        policy = replace(self.policy, timeout_seconds=remaining, max_bytes=min(self.policy.max_bytes, load.limit - load.used))
        headers = {k: v for k, v in (await request.all_headers()).items() if k.lower() not in _HOP_HEADERS and not k.startswith(":")}
        try:
            response = await fetch(request.url, policy, method=request.method, headers=headers, content=request.post_data_buffer)
        except ToolFailure as failure:
            load.refused.append(f"{request.url}: {failure}")
            await route.abort("blockedbyclient")
            return
        if response.truncated or load.used + len(response.body) > load.limit:  # requests run concurrently: check on arrival
            load.refused.append(f"{request.url}: page size cap of {load.limit} bytes reached")
            await route.abort("blockedbyclient")
            return
        load.used += len(response.body)
        body = response.body
        if response.url != request.url:
            self.final_urls[request.url] = response.url
            if request.resource_type == "document" and response.content_type == "text/html":
                body = _with_base(body, response.url)  # relative links resolve against where the page really is
        out_headers = {k: v for k, v in response.headers.items() if k.lower() not in _HOP_HEADERS}
        await route.fulfill(status=response.status, headers=out_headers, body=body)


async def _close_socket(socket: Any) -> None:
    """WebSockets are not fetched through the policy: closed before they connect."""
    await socket.close(code=1008, reason="refused by runner's network policy")


def _with_base(body: bytes, url: str) -> bytes:
    tag = f'<base href="{_attribute(url)}">'.encode()
    lowered = body[:4096].lower()
    if b"<base" in lowered:
        return body
    at = lowered.find(b"<head>")
    return body[: at + 6] + tag + body[at + 6 :] if at >= 0 else tag + body


def _attribute(text: str) -> str:
    return text.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;")
