"""``browse`` through the real CLI and real Chromium: what a page's SharedWorker and Worker
request goes through the context's filtering proxy under the agent's network policy. The
loopback site (127.0.0.1) is listed in ``network.allow_private_networks``; the second site
(127.0.0.2) is not, and is never reached, whether asked directly, by a worker or by a redirect."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.model.server import ScriptedServer
from tests.loopback_site import LoopbackSite
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
