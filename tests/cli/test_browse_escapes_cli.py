"""``browse`` through the real CLI and real Chromium: what a page's SharedWorker and Worker
request, a download (a link with ``download``, a navigation to an attachment, a redirect to
another host) and a WebSocket opened by a worker go through the context's filtering proxy
under the agent's network policy. The
loopback site (127.0.0.1) is listed in ``network.allow_private_networks``; the second site
(127.0.0.2) is not, and is never reached, whether asked directly, by a worker or by a redirect."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from runner.model.server import ScriptedServer
from tests.loopback_site import LoopbackSite, Response
from tests.support.project import run_cli, tool_call, write_project
from tests.tools.test_browse import escapes_site

CHROMIUM = Path("/usr/bin/chromium")
pytestmark = [
    pytest.mark.browser,
    pytest.mark.timeout(300),
    pytest.mark.skipif(not CHROMIUM.exists(), reason="headless chromium is not installed at /usr/bin/chromium"),
]


def browsing_project(root: Path, ranges: str) -> Path:
    return write_project(root, {
        "agents.d/reader.yaml": f"""\
apiVersion: runner/v1
kind: Agent
name: reader
model: {{id: gpt-4o-mini, max_tokens: 200}}
tools: [{{name: browse, settings: {{timeout_seconds: 20, settle_seconds: 3}}}}]
network: {{allow_private_networks: {ranges}}}
caps: {{max_steps: 4}}
""",
        "tasks.d/read_page.yaml": "apiVersion: runner/v1\nkind: Task\nname: read_page\nagent: reader\ngoal: Read the page.\n",
    })  # fmt: skip


@pytest.mark.parametrize(("ranges", "reaches_other"), [('["127.0.0.1/32"]', False), ('["127.0.0.1/32", "127.0.0.2/32"]', True)])
def test_a_pages_workers_meet_the_agents_network_policy(tmp_path: Path, ranges: str, reaches_other: bool) -> None:
    root = browsing_project(tmp_path / "p", ranges)
    with LoopbackSite() as site, LoopbackSite("127.0.0.2") as other:
        for path in ("/secret", "/prefetched", "/download", "/ws"):
            other.page(path, "TOP-SECRET-4711")
        escapes_site(site, other)
        rules = [{"times": 1, "reply": tool_call("browse", url=site.url("/escapes"))}, {"reply": "Read."}]
        with ScriptedServer({"rules": rules}) as server:
            result = run_cli(root, server, "run", "read_page")
            seen = [m["content"] for m in server.requests[-1].body["messages"] if m["role"] == "tool"]
        reached = {r.path for r in other.requests}
    assert result.returncode == 0, result.stderr
    (page,) = seen
    assert "own=DATA-OK" in page  # the SharedWorker's own-site request, answered through the proxy
    if reaches_other:
        assert "/secret" in reached
    else:
        assert reached == set() and "127.0.0.2" in page and "not a public address" in page


def browse_once(root: Path, url: str) -> tuple[subprocess.CompletedProcess[str], str]:
    """``runner run read_page`` whose agent browses ``url`` once; the tool's answer as the model saw it."""
    rules = [{"times": 1, "reply": tool_call("browse", url=url)}, {"reply": "Read."}]
    with ScriptedServer({"rules": rules}) as server:
        result = run_cli(root, server, "run", "read_page")
        seen = [m["content"] for m in server.requests[-1].body["messages"] if m["role"] == "tool"]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    return result, seen[0] if seen else ""


DOWNLOAD = {"Content-Type": "application/octet-stream", "Content-Disposition": "attachment; filename=x.bin"}
STARTS = {
    "a[download] redirected": "<a id=dl href='/download-elsewhere' download=x.bin>x</a><script>document.getElementById('dl').click()</script>",
    "navigation redirected": "<script>location.href = '/download-elsewhere';</script>",
    "a[download] direct": "<a id=dl href='OTHER/download' download=x.bin>x</a><script>document.getElementById('dl').click()</script>",
}


@pytest.mark.parametrize("how", sorted(STARTS))
def test_a_download_meets_the_agents_network_policy_at_every_hop(tmp_path: Path, how: str) -> None:
    root = browsing_project(tmp_path / "p", '["127.0.0.1/32"]')
    with LoopbackSite() as site, LoopbackSite("127.0.0.2") as other:
        escapes_site(site, other)
        other.routes["/download"] = Response(200, DOWNLOAD, b"TOP-SECRET-4711")
        start = STARTS[how].replace("OTHER", f"http://127.0.0.2:{other.port}")
        site.page("/start", f"<html><body><p>Starting a download.</p>{start}</body></html>")
        result, page = browse_once(root, site.url("/start"))
        reached = [r.path for r in other.requests]
        attempted = site.seen("/download-elsewhere")
    assert result.returncode == 0, result.stderr[-2000:]
    assert reached == [], reached  # neither the redirect's target nor the direct link left the browser
    assert "TOP-SECRET" not in page
    if "redirected" in how:
        assert attempted  # the download started, and was stopped at its second hop
    else:
        assert "127.0.0.2" in page and "not a public address" in page, page


def test_a_websocket_from_a_worker_is_refused_even_to_an_allowed_host(tmp_path: Path) -> None:
    root = browsing_project(tmp_path / "p", '["127.0.0.1/32", "127.0.0.2/32"]')
    with LoopbackSite() as site, LoopbackSite("127.0.0.2") as other:
        escapes_site(site, other)
        worker = "onconnect = (event) => {\n  try { new WebSocket('ws://OTHER/ws-from-worker'); } catch (e) {}\n"
        worker += "  event.ports[0].postMessage('socket tried');\n};"
        site.routes["/shared.js"] = Response(200, {"Content-Type": "text/javascript"}, worker.replace("OTHER", f"127.0.0.2:{other.port}").encode())
        result, page = browse_once(root, site.url("/escapes"))
        reached = {r.path for r in other.requests}
    assert result.returncode == 0, result.stderr[-2000:]
    assert "socket tried" in page, page  # the worker ran and opened its socket
    assert "/ws-from-worker" not in reached and "/ws" not in reached, reached  # neither the page's nor the worker's upgrade
    assert "/secret" in reached  # the policy lets ordinary requests to this host through
