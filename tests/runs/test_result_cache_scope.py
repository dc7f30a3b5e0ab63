"""The result cache answers only what the caller may see, through the real CLI: a page agent
A fetched under its intranet exemption is not served to agent B (whose network policy refuses
the address), the same model id at another endpoint or under another key is asked again, and
a stored entry of another shape is a miss, not a traceback."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from runner.model.server import ScriptedServer
from tests.loopback_site import LoopbackSite
from tests.support.project import run_cli, tool_call, write_project

pytestmark = pytest.mark.timeout(240)

INTRANET_PAGE = "<html><body><p>Quarterly numbers: intranet only 7731.</p></body></html>"


def reader(name: str, network: str) -> str:
    return (
        f"apiVersion: runner/v1\nkind: Agent\nname: {name}\nmodel: {{id: gpt-4o-mini, max_tokens: 100}}\n"
        f"tools: [fetch_url]\n{network}cache: {{ttl: 1d}}\n"
    )


def task(name: str, agent: str) -> str:
    return f"apiVersion: runner/v1\nkind: Task\nname: {name}\nagent: {agent}\ngoal: Read the page.\n"


def fetched(root: Path, task_name: str, url: str) -> tuple[list[str], Any]:
    """Run ``task_name`` whose model fetches ``url`` once; the tool messages the model saw."""
    rules = [{"times": 1, "reply": tool_call("fetch_url", url=url)}, {"reply": {"content": "done"}}]
    with ScriptedServer({"rules": rules}) as server:
        done = run_cli(root, server, "run", task_name, "--no-report")
        seen = [m["content"] for m in server.requests[-1].body["messages"] if m["role"] == "tool"]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    return seen, done


def test_a_page_fetched_under_an_exemption_is_not_served_to_an_agent_without_it(tmp_path: Path) -> None:
    root = write_project(tmp_path / "p", {
        "agents.d/inside.yaml": reader("inside", 'network: {allow_private_networks: ["127.0.0.1/32"]}\n'),
        "agents.d/outside.yaml": reader("outside", ""),
        "tasks.d/a.yaml": task("a", "inside"),
        "tasks.d/b.yaml": task("b", "outside"),
    })  # fmt: skip
    with LoopbackSite() as site:
        site.page("/numbers", INTRANET_PAGE)
        url = site.url("/numbers")
        seen_a, done_a = fetched(root, "a", url)
        assert done_a.returncode == 0 and "intranet only 7731" in seen_a[0]
        seen_b, done_b = fetched(root, "b", url)
        assert done_b.returncode == 0
        assert "7731" not in seen_b[0] and seen_b[0].startswith("error: refused"), seen_b[0]
        assert len(site.seen("/numbers")) == 1  # B's policy refused it before any request
        again, _ = fetched(root, "a", url)  # A's own entry still serves A
        assert "intranet only 7731" in again[0] and len(site.seen("/numbers")) == 1


DETERMINISTIC = """\
apiVersion: runner/v1
kind: Agent
name: asker
model: {id: gpt-4o-mini, temperature: 0, max_tokens: 100}
system_prompt: Answer.
cache: {ttl: 1d}
"""
ASK = "apiVersion: runner/v1\nkind: Task\nname: ask\nagent: asker\ngoal: Which server are you?\n"


def ask(root: Path, server: ScriptedServer, *args: str, key: str | None = None) -> str:
    done = run_cli(root, server, "run", "ask", "--no-report", *args, **({"key": key} if key else {}))
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-3000:]
    return done.stdout.strip()


def test_the_same_model_at_another_endpoint_or_key_is_asked_again(tmp_path: Path) -> None:
    root = write_project(tmp_path / "p", {"agents.d/asker.yaml": DETERMINISTIC, "tasks.d/ask.yaml": ASK})
    with ScriptedServer({"fallback": {"content": "production"}}) as prod, \
            ScriptedServer({"fallback": {"content": "staging"}}) as staging:  # fmt: skip
        assert ask(root, prod) == "production"
        assert ask(root, prod) == "production" and len(prod.requests) == 1  # the cache works
        assert ask(root, prod, "--base-url", staging.base_url) == "staging"
        assert len(staging.requests) == 1
        assert ask(root, prod, key="sk-another-account-0123456789") == "production"
        assert len(prod.requests) == 2  # another key: another account's answers
        assert ask(root, prod) == "production" and len(prod.requests) == 2


@pytest.mark.parametrize("stored", [
    "not json at all", "[1, 2]", '{"content": 5}', '{"content": "x", "tool_calls": 7}',
    '{"content": null, "tool_calls": [{"id": 1}]}', '{"content": "x", "finish_reason": ["stop"]}',
])  # fmt: skip
def test_a_stored_answer_of_another_shape_is_a_miss(tmp_path: Path, stored: str) -> None:
    root = write_project(tmp_path / "p", {"agents.d/asker.yaml": DETERMINISTIC, "tasks.d/ask.yaml": ASK})
    with ScriptedServer({"fallback": {"content": "fresh"}}) as server:
        ask(root, server)
        edit(root, "UPDATE result_cache SET value_json = ?", (stored,))
        assert ask(root, server) == "fresh" and len(server.requests) == 2
        assert ask(root, server) == "fresh" and len(server.requests) == 2  # replaced by a good entry


@pytest.mark.parametrize("stored", ["{bad", '{"content": 3}', '{"content": "x", "sources": [{"kind": "web"}]}', '{"content": "x", "sources": 4}'])
def test_a_stored_tool_result_of_another_shape_is_a_miss(tmp_path: Path, stored: str) -> None:
    root = write_project(tmp_path / "p", {
        "agents.d/inside.yaml": reader("inside", 'network: {allow_private_networks: ["127.0.0.1/32"]}\n'),
        "tasks.d/a.yaml": task("a", "inside"),
    })  # fmt: skip
    with LoopbackSite() as site:
        site.page("/numbers", INTRANET_PAGE)
        fetched(root, "a", site.url("/numbers"))
        edit(root, "UPDATE result_cache SET value_json = ? WHERE kind = 'tool'", (stored,))
        seen, done = fetched(root, "a", site.url("/numbers"))
        assert done.returncode == 0 and "intranet only 7731" in seen[0] and len(site.seen("/numbers")) == 2


def edit(root: Path, sql: str, params: tuple[Any, ...]) -> None:
    db = sqlite3.connect(root / ".runner" / "runs.sqlite3")
    try:
        assert db.execute(sql, params).rowcount >= 1
        db.commit()
    finally:
        db.close()


def test_the_stored_value_never_holds_the_key(tmp_path: Path) -> None:
    root = write_project(tmp_path / "p", {"agents.d/asker.yaml": DETERMINISTIC, "tasks.d/ask.yaml": ASK})
    with ScriptedServer({"fallback": {"content": "fine"}}) as server:
        ask(root, server, key="sk-owner-fingerprint-0123456789")
    db = sqlite3.connect(root / ".runner" / "runs.sqlite3")
    rows = db.execute("SELECT key, value_json FROM result_cache").fetchall()
    db.close()
    assert rows and all("sk-owner" not in json.dumps(row) for row in rows)
