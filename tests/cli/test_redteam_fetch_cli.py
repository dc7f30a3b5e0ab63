"""Red-team URLs a scripted model hands ``fetch_url``, through the real CLI and the loopback
OpenAI server: a URL Python cannot parse, or a redirect to one, is an observation for the
model; it used to end the whole run with a ``ValueError`` traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.model.server import ScriptedServer
from tests.loopback_site import LoopbackSite
from tests.support.project import run_cli, tool_call, write_project

pytestmark = pytest.mark.timeout(120)

AGENT = """\
apiVersion: runner/v1
kind: Agent
name: reader
model: {id: gpt-4o-mini, max_tokens: 100}
tools: [fetch_url]
network: {allow_private_networks: ["127.0.0.1/32"]}
stuck: {max_repeats: 20, max_invalid_calls: 20}
"""
TASK = "apiVersion: runner/v1\nkind: Task\nname: read\nagent: reader\ngoal: Read the pages.\n"
BAD_URLS = {
    "http://1.1.1.1:99999/": "has an invalid port",
    "http://example.com:-1/": "has an invalid port",
    "http://example.com:port/": "has an invalid port",
    "http://[::1/": "is not a valid URL",
    "https://[fe80::1%zz/": "is not a valid URL",
}


def run(root: Path, calls: list[dict[str, object]]) -> tuple[str, list[str], int]:
    rules = [{"times": 1, "reply": call} for call in calls] + [{"reply": {"content": "read them"}}]
    with ScriptedServer({"rules": rules}) as server:
        done = run_cli(root, server, "run", "read")
        tool_messages = [m["content"] for m in server.requests[-1].body["messages"] if m["role"] == "tool"]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    return done.stdout, tool_messages, done.returncode


def test_urls_that_do_not_parse_are_refused_as_observations(tmp_path: Path) -> None:
    root = write_project(tmp_path / "p", {"agents.d/reader.yaml": AGENT, "tasks.d/read.yaml": TASK})
    stdout, seen, code = run(root, [tool_call("fetch_url", url=url) for url in BAD_URLS])
    assert code == 0 and stdout.strip() == "read them"
    for (url, said), observation in zip(BAD_URLS.items(), seen, strict=True):
        assert observation.startswith("error: refused:") and said in observation, (url, observation)


def test_a_redirect_to_a_url_that_does_not_parse_ends_that_fetch_only(tmp_path: Path) -> None:
    root = write_project(tmp_path / "p", {"agents.d/reader.yaml": AGENT, "tasks.d/read.yaml": TASK})
    with LoopbackSite() as site:
        site.redirect("/bad-v6", "http://[::1/")
        site.redirect("/bad-port", "http://127.0.0.1:99999/")
        site.page("/fine", "<html><body><p>A page that is fine.</p></body></html>")
        calls = [tool_call("fetch_url", url=site.url(p)) for p in ("/bad-v6", "/bad-port", "/fine")]
        stdout, seen, code = run(root, calls)
    assert code == 0 and stdout.strip() == "read them"
    assert "redirected to an invalid URL" in seen[0], seen[0]
    assert "has an invalid port" in seen[1], seen[1]
    assert "A page that is fine." in seen[2], seen[2]
