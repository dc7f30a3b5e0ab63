"""browse on real headless Chromium against loopback pages: JavaScript, actions, screenshots,
and the network policy on every request the page makes."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from runner.errors import ToolFailure
from runner.tools.base import ToolContext
from runner.tools.browser import Browser
from runner.tools.net import NetworkPolicy
from runner.tools.registry import ToolRegistry
from tests.loopback_site import LoopbackSite, Response
from tests.support.services import requires

CHROMIUM = Path("/usr/bin/chromium")
pytestmark = [
    pytest.mark.browser,
    pytest.mark.timeout(120),
    requires(CHROMIUM.exists(), "headless chromium is not installed at /usr/bin/chromium"),
]
LOOPBACK = NetworkPolicy(allow_private_networks=("127.0.0.1/32",), timeout_seconds=20)

JS_APP = """<!doctype html><html><head><title>Inventory</title></head><body>
<nav><a href="/">Home</a></nav><main id="app">Loading…</main>
<script>
fetch('/api/items').then(r => r.json()).then(items => {
  document.getElementById('app').innerHTML = '<article><h1>Inventory report</h1>' +
    items.map(i => '<p>' + i.name + ' has ' + i.stock + ' units in stock at the Leeds warehouse.</p>').join('') +
    '<p><a href="/details">Stock details</a></p></article>';
});
</script></body></html>"""
FORM = """<!doctype html><html><head><title>Search</title></head><body>
<form onsubmit="event.preventDefault(); document.getElementById('out').textContent =
  'You searched the catalogue for ' + document.querySelector('input[name=q]').value + ' and found 3 matching products.';">
<input name="q"><button id="go" type="submit">Search</button></form>
<p id="out">Nothing searched yet.</p></body></html>"""


@pytest.fixture
def site() -> LoopbackSite:
    with LoopbackSite() as s:
        yield s


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    async with Browser() as b:
        yield b


@pytest.fixture
def browse_ctx(make_ctx: Callable[..., ToolContext], browser: Browser, workspace: Path) -> Callable[..., ToolContext]:
    def make(network: NetworkPolicy = LOOPBACK, step: str = "main", **settings: object) -> ToolContext:
        return make_ctx(network=network, browser=browser.tab(step, workspace), settings={"browse": settings})

    return make


async def test_a_page_built_by_javascript_is_read_after_its_script_runs(registry: ToolRegistry, site, browse_ctx):
    site.page("/app", JS_APP)
    site.json("/api/items", [{"name": "Blue widget", "stock": 41}, {"name": "Red widget", "stock": 7}])
    result = await registry.invoke("browse", {"url": site.url("/app")}, browse_ctx())
    assert "Blue widget has 41 units in stock" in result.content and "Red widget has 7 units" in result.content
    assert result.data["title"] == "Inventory"
    assert {"url": site.url("/details"), "text": "Stock details"} in result.data["links"]
    (api,) = site.seen("/api/items")
    assert "headlesschrome" in api.headers.get("user-agent", "").lower()  # fetched for the page, with its headers
    assert [s.location for s in result.sources] == [site.url("/app")]


async def test_a_redirect_to_a_refused_address_is_stopped(registry: ToolRegistry, site, browse_ctx):
    site.redirect("/go", "http://10.255.255.1/admin")
    with pytest.raises(ToolFailure) as failure:
        await registry.invoke("browse", {"url": site.url("/go")}, browse_ctx())
    assert "could not open" in str(failure.value) and "10.255.255.1" in str(failure.value)
    assert "not a public address" in str(failure.value)
    assert [r.path for r in site.requests] == ["/go"]


async def test_a_redirect_within_the_policy_is_followed_and_relative_links_resolve_there(registry, site, browse_ctx):
    site.redirect("/old", "/new/page")
    site.page("/new/page", "<html><head><title>New</title></head><body><p>Moved here.</p><a href='next'>Next</a></body></html>")
    result = await registry.invoke("browse", {"url": site.url("/old")}, browse_ctx())
    assert "Moved here." in result.content
    assert result.data["url"] == site.url("/new/page") and result.content.startswith(f"URL: {site.url('/new/page')}")
    assert result.data["links"] == [{"url": site.url("/new/next"), "text": "Next"}]


async def test_a_page_that_never_finishes_loading_ends_at_the_call_limit(registry: ToolRegistry, site, browse_ctx):
    site.hang("/slow")
    with pytest.raises(ToolFailure, match=r"could not open|longer than"):
        await registry.invoke("browse", {"url": site.url("/slow")}, browse_ctx(timeout_seconds=3))
    site.page("/ok", "<html><body><p>The browser is still usable afterwards.</p></body></html>")
    after = await registry.invoke("browse", {"url": site.url("/ok")}, browse_ctx(timeout_seconds=10))
    assert "still usable" in after.content


async def test_a_subresource_that_never_loads_still_shows_the_page(registry: ToolRegistry, site, browse_ctx):
    site.page("/p", "<html><body><article><h1>Quarterly note</h1><p>Sales of heat pumps rose in the third quarter "
                    "according to the regional installers survey.</p></article><img src='/never.png'></body></html>")  # fmt: skip
    site.hang("/never.png", body=b"\x89PNG")
    result = await registry.invoke("browse", {"url": site.url("/p")}, browse_ctx(timeout_seconds=8, settle_seconds=1))
    assert "Sales of heat pumps rose" in result.content


async def test_every_request_of_the_page_is_held_to_the_policy(registry: ToolRegistry, site, browse_ctx):
    page = f"""<html><body><p>Public page.</p>
    <img src="http://169.254.169.254/latest/meta-data/">
    <script>fetch('http://127.0.0.2:{site.port}/secret').catch(() => {{}});
    try {{ new WebSocket('ws://127.0.0.1:{site.port}/ws'); }} catch (e) {{}}</script>
    <iframe src="http://192.168.0.1/"></iframe></body></html>"""
    site.page("/mixed", page)
    result = await registry.invoke("browse", {"url": site.url("/mixed"), "actions": [{"action": "wait_for", "selector": "p"}]},
                                   browse_ctx(settle_seconds=1))  # fmt: skip
    refused = " ".join(result.data["refused"])
    assert "169.254.169.254" in refused and "127.0.0.2" in refused and "192.168.0.1" in refused
    assert "request(s) refused by the network policy" in result.content
    assert [r.path for r in site.requests] == ["/mixed"]  # neither the secret nor the websocket reached the server


async def test_without_the_allow_list_loopback_is_refused(registry: ToolRegistry, site, browse_ctx):
    site.page("/", "<p>hi</p>")
    with pytest.raises(ToolFailure, match="not a public address"):
        await registry.invoke("browse", {"url": site.url("/")}, browse_ctx(network=NetworkPolicy()))
    assert site.requests == []


@pytest.mark.parametrize("url", ["file:///etc/passwd", "chrome://settings", "javascript:alert(1)", "ftp://example.com/"])
async def test_only_http_urls_are_opened(registry: ToolRegistry, browse_ctx, url: str):
    with pytest.raises(ToolFailure, match="only http and https"):
        await registry.invoke("browse", {"url": url}, browse_ctx())


async def test_fill_click_and_follow_on_the_same_page(registry: ToolRegistry, site, browse_ctx):
    site.page("/search", FORM)
    ctx = browse_ctx()
    actions = [{"action": "fill", "selector": "input[name=q]", "value": "gaskets"}, {"action": "click", "selector": "#go"}]
    result = await registry.invoke("browse", {"url": site.url("/search"), "actions": actions}, ctx)
    assert "You searched the catalogue for gaskets and found 3 matching products." in result.content
    again = await registry.invoke("browse", {"actions": [{"action": "wait_for", "selector": "#out"}]}, ctx)
    assert "gaskets" in again.content  # no url: the same page, as it was left


async def test_a_missing_element_fails_the_action_by_number(registry: ToolRegistry, site, browse_ctx):
    site.page("/search", FORM)
    # The click waits for what is left of the budget; 6 s leaves the page time to load on a loaded machine.
    with pytest.raises(ToolFailure, match=r"action 1 \(click '#nope'\) failed"):
        await registry.invoke("browse", {"url": site.url("/search"), "actions": [{"action": "click", "selector": "#nope"}]},
                              browse_ctx(timeout_seconds=6))  # fmt: skip


async def test_no_page_yet_needs_a_url(registry: ToolRegistry, browse_ctx):
    with pytest.raises(ToolFailure, match="give a url"):
        await registry.invoke("browse", {}, browse_ctx())


async def test_a_screenshot_is_a_workspace_artifact(registry: ToolRegistry, site, browse_ctx, workspace: Path):
    site.page("/app", JS_APP)
    site.json("/api/items", [{"name": "Blue widget", "stock": 41}])
    result = await registry.invoke("browse", {"url": site.url("/app"), "screenshot": True}, browse_ctx())
    assert result.artifacts == ["screenshots/main-1.png"]
    assert (workspace / "screenshots/main-1.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


async def test_the_page_size_cap_refuses_what_comes_after_it(registry: ToolRegistry, site, browse_ctx):
    site.page("/big", "<html><body><p>A page with large images on it for the test.</p>"
                      "<img src='/a.png'><img src='/b.png'><img src='/c.png'></body></html>")  # fmt: skip
    for name in ("a", "b", "c"):
        site.routes[f"/{name}.png"] = Response(200, {"Content-Type": "image/png"}, b"\x89PNG" + b"0" * 40_000)
    result = await registry.invoke("browse", {"url": site.url("/big")}, browse_ctx(max_page_bytes=60_000, settle_seconds=1))
    assert any("page size cap of 60000 bytes reached" in r for r in result.data["refused"])


async def test_the_run_time_limit_covers_all_calls(registry: ToolRegistry, site, browse_ctx, browser: Browser):
    site.page("/", "<html><body><p>hello there, reader</p></body></html>")
    ctx = browse_ctx(max_run_seconds=30)
    await registry.invoke("browse", {"url": site.url("/")}, ctx)
    browser.seconds_used = 30.0
    with pytest.raises(ToolFailure, match="used its 30 s for this run"):
        await registry.invoke("browse", {"url": site.url("/")}, ctx)


async def test_steps_get_separate_tabs(registry: ToolRegistry, site, browse_ctx):
    site.page("/one", "<html><body><p>First page of the test.</p></body></html>")
    await registry.invoke("browse", {"url": site.url("/one")}, browse_ctx(step="a"))
    with pytest.raises(ToolFailure, match="give a url"):
        await registry.invoke("browse", {"actions": []}, browse_ctx(step="b"))


# --- what the route handler cannot see: workers, downloads, prefetch, WebSockets ----------

SHARED = """onconnect = async (event) => {
  const port = event.ports[0];
  let own = 'none', other = 'none';
  try { own = await (await fetch('/data')).text(); } catch (e) { own = 'failed'; }
  try { other = await (await fetch('OTHER/secret', {mode: 'no-cors'})).text() || 'opaque'; } catch (e) { other = 'blocked'; }
  port.postMessage('own=' + own + ' other=' + other);
};"""
WORKER = """(async () => {
  let via = 'none';
  try { via = await (await fetch('/go')).text() || 'opaque'; } catch (e) { via = 'blocked'; }
  postMessage('redirected=' + via);
})();"""
ESCAPES = """<html><head><link rel="prefetch" href="OTHER/prefetched"><link rel="preconnect" href="OTHER">
</head><body><p id="shared">waiting</p><p id="worker">waiting</p>
<script>
const shared = new SharedWorker('/shared.js');
shared.port.onmessage = (e) => { document.getElementById('shared').textContent = e.data; };
shared.port.start();
const worker = new Worker('/worker.js');
worker.onmessage = (e) => { document.getElementById('worker').textContent = e.data; };
try { new WebSocket('ws://OTHER_HOST/ws'); } catch (e) {}
if (navigator.serviceWorker) { navigator.serviceWorker.register('/sw.js').catch(() => {}); }
</script></body></html>"""


@pytest.fixture
def other() -> LoopbackSite:
    """A second site on 127.0.0.2: a private address the LOOPBACK policy (127.0.0.1/32) does not list."""
    with LoopbackSite("127.0.0.2") as s:
        for path in ("/secret", "/prefetched", "/download", "/ws"):
            s.page(path, "TOP-SECRET-4711")
        yield s


def escapes_site(site: LoopbackSite, other: LoopbackSite) -> None:
    base = f"http://127.0.0.2:{other.port}"
    script = {"Content-Type": "text/javascript"}
    site.page("/escapes", ESCAPES.replace("OTHER_HOST", f"127.0.0.2:{other.port}").replace("OTHER", base))
    site.routes["/shared.js"] = Response(200, script, SHARED.replace("OTHER", base).encode())
    site.routes["/worker.js"] = Response(200, script, WORKER.encode())
    site.routes["/sw.js"] = Response(200, script, f"fetch('{base}/secret');".encode())
    site.routes["/data"] = Response(200, {"Content-Type": "text/plain"}, b"DATA-OK")
    site.redirect("/go", f"{base}/secret")
    site.redirect("/download-elsewhere", f"{base}/download")


async def test_workers_downloads_prefetch_and_websockets_meet_the_policy(registry: ToolRegistry, site, other, browse_ctx):
    escapes_site(site, other)
    result = await registry.invoke("browse", {"url": site.url("/escapes")}, browse_ctx(settle_seconds=3))
    assert other.requests == []  # nothing reached the address the policy does not list
    assert "own=DATA-OK" in result.content  # a SharedWorker's allowed request is answered (through the proxy)
    assert "TOP-SECRET" not in result.content and "redirected=blocked" in result.content
    refused = " ".join(result.data["refused"])
    assert "127.0.0.2" in refused and "not a public address" in refused


async def test_the_same_requests_reach_a_range_the_agent_lists(registry: ToolRegistry, site, other, browse_ctx):
    escapes_site(site, other)
    both = NetworkPolicy(allow_private_networks=("127.0.0.1/32", "127.0.0.2/32"), timeout_seconds=20)
    result = await registry.invoke("browse", {"url": site.url("/escapes")}, browse_ctx(network=both, settle_seconds=3))
    assert "own=DATA-OK" in result.content and "other=TOP-SECRET-4711" not in result.content  # no-cors: opaque
    reached = {r.path for r in other.requests}
    assert "/secret" in reached  # the SharedWorker's and the redirected Worker's requests went out, under the policy
    assert "redirected=" in result.content


@pytest.mark.parametrize("how", ["a[download]", "navigation"])
async def test_a_download_meets_the_policy_at_every_hop(registry: ToolRegistry, site, other, browse_ctx, how: str):
    escapes_site(site, other)
    other.routes["/download"] = Response(200, {"Content-Type": "application/octet-stream",
                                               "Content-Disposition": "attachment; filename=x.bin"}, b"TOP-SECRET-4711")  # fmt: skip
    start = ("<a id=dl href='/download-elsewhere' download=x.bin>x</a><script>document.getElementById('dl').click()</script>"
             if how == "a[download]" else "<script>location.href = '/download-elsewhere';</script>")  # fmt: skip
    site.page("/start", f"<html><body><p>Starting a download.</p>{start}</body></html>")
    with contextlib.suppress(ToolFailure):  # the page may be mid-navigation when read: the refusal is what counts
        await registry.invoke("browse", {"url": site.url("/start")}, browse_ctx(settle_seconds=2))
    assert other.requests == []
    assert site.seen("/download-elsewhere")  # the download was attempted, and stopped at the redirect


async def test_a_context_without_its_proxy_reaches_nothing(browser: Browser, site) -> None:
    """The browser-wide proxy flag points at a port nothing listens on: a context made without
    runner's proxy (which runner never makes) cannot reach even an allowed address."""
    site.page("/", "<p>hi</p>")
    chromium = await browser.chromium()
    context = await chromium.new_context()
    try:
        page = await context.new_page()
        with pytest.raises(Exception, match=r"ERR_PROXY_CONNECTION_FAILED|ERR_TUNNEL|ERR_CONNECTION"):
            await page.goto(site.url("/"), timeout=10_000)
    finally:
        await context.close()
    assert site.requests == []
