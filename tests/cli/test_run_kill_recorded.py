"""A plain ``runner run`` killed with SIGKILL after a model call was answered and recorded,
while its next call is in flight, then resumed with the same ``--run-id``: the run store keeps
the recorded call exactly as billed (once, not at its worst case, not twice), counts the call
in flight at its worst case (``unsettled``), and the resumed run's totals are exactly the sum
of what the store recorded. On both store backends (SQLite, PostgreSQL through $RUNNER_STORE_URL)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from runner.model.server import ScriptedServer
from runner.store.connect import open_database
from tests.support.project import run_cli, runner_env, write_project

pytestmark = pytest.mark.timeout(300)
PROJECT = {
    "agents.d/a.yaml": (
        "apiVersion: runner/v1\nkind: Agent\nname: answerer\n"
        "model: {id: gpt-4o-mini, max_tokens: 100, retries: 0}\nsystem_prompt: You answer briefly.\ntools: [calculator]\n"
    ),
    "tasks.d/ask.yaml": (
        "apiVersion: runner/v1\nkind: Task\nname: ask\ninputs: {question: {type: string}}\nagent: answerer\n"
        'goal: "{{ inputs.question }}"\n'
    ),
}
ARGS = ("run", "ask", "-i", "question=What is 1 + 1?", "--run-id", "killed-1", "--max-cost-usd", "0.5")
TOOL_CALL = {"tool_calls": [{"name": "calculator", "arguments": {"expression": "1 + 1"}}]}


def calls(target: str | Path) -> list[dict[str, Any]]:
    db = open_database(target)
    try:
        return db.rows("SELECT status, input_tokens, output_tokens, cost_usd FROM model_calls WHERE run_id = 'killed-1' ORDER BY id")
    finally:
        db.close()


def billed(*servers: ScriptedServer) -> Counter[tuple[int, int]]:
    return Counter((int(u["prompt_tokens"]), int(u["completion_tokens"])) for s in servers for _, u in s.billed)


def test_a_run_killed_after_a_recorded_call_resumes_with_exact_accounting(
    tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    url = str(request.getfixturevalue("postgres_url")) if backend == "postgresql" else None
    root = write_project(tmp_path / "project", PROJECT)
    env = {"RUNNER_STORE_URL": url} if url else {}
    target: str | Path = url or root / ".runner" / "runs.sqlite3"
    script = {"rules": [{"times": 1, "reply": TOOL_CALL}, {"when": {"last_role": "tool"}, "reply": {"hang_seconds": 120}}]}
    with ScriptedServer(script) as first:
        process = subprocess.Popen([sys.executable, "-m", "runner", *ARGS], cwd=root, env=runner_env(first, extra=env),
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)  # fmt: skip
        try:
            while len(first.requests) < 2:  # the first call answered (the tool ran), the second in flight
                assert process.poll() is None
                time.sleep(0.05)
            while [c["status"] for c in calls(target)] != ["ok", "reserved"]:  # both written before the kill
                assert process.poll() is None
                time.sleep(0.05)
        finally:
            os.kill(process.pid, signal.SIGKILL)
            process.wait()
        killed_billed = billed(first)
    before = calls(target)
    assert [c["status"] for c in before] == ["ok", "reserved"]
    assert Counter((int(c["input_tokens"]), int(c["output_tokens"])) for c in before[:1]) == killed_billed  # as billed
    worst = float(before[1]["cost_usd"])

    with ScriptedServer({"fallback": "2"}) as second:
        result = run_cli(root, second, *ARGS, "--json", env=env)
        resumed_billed = billed(second)
    assert result.returncode == 0, result.stderr
    end = json.loads(result.stdout.strip().splitlines()[-1])
    after = calls(target)
    statuses = [c["status"] for c in after]
    assert statuses[:2] == ["ok", "unsettled"] and set(statuses[2:]) == {"ok"}
    assert after[0] == before[0]  # the recorded call is kept as it was: not re-priced, not counted again
    assert float(after[1]["cost_usd"]) == pytest.approx(worst)  # the call in flight at its worst case
    ok = [c for c in after if c["status"] == "ok"]
    assert Counter((int(c["input_tokens"]), int(c["output_tokens"])) for c in ok) == killed_billed + resumed_billed
    assert end["cost_usd"] == pytest.approx(sum(float(c["cost_usd"]) for c in after))  # exactly what the store holds
    assert end["cost_usd"] >= sum(float(c["cost_usd"]) for c in ok)  # never below what was billed
    assert any("in flight" in w and "estimate" in w for w in end["warnings"])

    with ScriptedServer({"fallback": "3"}) as third:
        again = run_cli(root, third, *ARGS, "--json", env=env)
        assert third.requests == []  # a completed run re-run with its id pays nothing again
    assert again.returncode == 0, again.stderr
    assert calls(target) == after
