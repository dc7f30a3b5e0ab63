"""A provider's own spend ceiling (OpenAI's documented 429 ``insufficient_quota``) is not a rate
limit: a run fails at once without retrying, and a batch stops with the reason, its rows
``not_run`` (they run again, same command, once the limit is raised), instead of retrying
every row into the same refusal. A plain 429 is still retried."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runner.model.server import ScriptedServer
from tests.support.project import run_cli, write_project

pytestmark = pytest.mark.timeout(180)
QUOTA = {
    "status": 429,
    "body": {"error": {"message": "You exceeded your current quota, please check your plan and billing details.",
                       "type": "insufficient_quota", "param": None, "code": "insufficient_quota"}},
}  # fmt: skip
FILES = {
    "agents.d/a.yaml": "apiVersion: runner/v1\nkind: Agent\nname: writer\nmodel: {id: gpt-4o-mini, max_tokens: 50}\nsystem_prompt: Write.\n",
    "tasks.d/t.yaml": "apiVersion: runner/v1\nkind: Task\nname: echo\ninputs:\n  text: {type: string}\nagent: writer\ngoal: 'Say {{ inputs.text }}'\n",
}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = write_project(tmp_path / "p", FILES)
    (root / "rows.jsonl").write_text("".join(json.dumps({"text": f"row {i}"}) + "\n" for i in range(20)))
    return root


def test_a_run_over_the_provider_quota_fails_without_retrying(project: Path) -> None:
    with ScriptedServer({"rules": [{"reply": {"fault": QUOTA}}]}) as server:
        result = run_cli(project, server, "run", "echo", "--input", "text=hi", "--no-report", "--json")
        sent = len(server.requests)
    assert result.returncode == 1, result.stderr
    assert sent == 1  # not retried
    finished = json.loads(result.stdout.splitlines()[-1])
    assert finished["error_kind"] == "quota_exceeded" and "spend or quota limit was reached" in finished["error"]


def test_a_batch_over_the_provider_quota_stops_with_the_reason(project: Path) -> None:
    out = project / "out.jsonl"
    with ScriptedServer({"rules": [{"reply": {"fault": QUOTA}}]}) as server:
        result = run_cli(project, server, "batch", "echo", "--input", "rows.jsonl", "--output", str(out), "--concurrency", "2",
                         "--progress", "none")  # fmt: skip
        sent = len(server.requests)
    assert result.returncode == 1, result.stdout + result.stderr
    assert sent <= 2  # the rows in flight when the first refusal came, once each
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert {r["status"] for r in rows} == {"not_run"} and len(rows) == 20
    assert "quota" in result.stdout + result.stderr


def test_a_plain_rate_limit_is_still_retried(project: Path) -> None:
    script = {"rules": [{"times": 1, "reply": {"fault": {"status": 429, "retry_after": 0}}}], "fallback": "Done."}
    with ScriptedServer(script) as server:
        result = run_cli(project, server, "run", "echo", "--input", "text=hi", "--no-report", "--json")
        sent = len(server.requests)
    assert result.returncode == 0, result.stderr
    assert sent == 2
