"""Red-team the money cap with an endpoint that bills a completion and then answers 5xx (a
gateway that gave up while its upstream finished): the client retries, each attempt billed.
The runner released the reservation of a failed 5xx attempt, so a batch capped at $0.002
let the endpoint bill 16 times the cap; now such an attempt counts at its worst case."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from runner.model.server import ScriptedServer
from tests.support.project import run_cli, write_project

pytestmark = pytest.mark.timeout(300)

CAP_USD = 0.002
AGENT = """\
apiVersion: runner/v1
kind: Agent
name: reader
model: {id: gpt-4o-mini, max_tokens: 100, retries: 2}
tools: [calculator]
"""
TASK = """\
apiVersion: runner/v1
kind: Task
name: read
inputs:
  text: {type: string}
agent: reader
goal: "Say what this is about: {{ inputs.text }}"
"""
TEXT = " ".join(["The committee met and agreed to review the quarterly plan."] * 18)


def script(failures: int | None) -> dict[str, object]:
    fault = {"reply": {"fault": {"status": 502, "billed": True}, "usage": {"completion_tokens": 100}}}
    if failures is not None:
        fault["times"] = failures
    return {"tokenizer": "o200k_base", "rules": [fault], "fallback": {"content": "A plan.", "usage": {"completion_tokens": 5}}}


@pytest.mark.parametrize(("concurrency", "failures"), [(1, None), (16, None), (16, 12)])
def test_a_batch_never_pays_more_than_its_cap_when_5xx_answers_were_billed(tmp_path: Path, concurrency: int, failures: int | None) -> None:
    rows = "".join(json.dumps({"id": f"r{i}", "text": f"{i}: {TEXT}"}) + "\n" for i in range(40))
    root = write_project(tmp_path / "p", {"agents.d/reader.yaml": AGENT, "tasks.d/read.yaml": TASK, "rows.jsonl": rows})
    args = ["batch", "read", "--input", "rows.jsonl", "--output", "out.jsonl", "--concurrency", str(concurrency),
            "--max-cost-usd", str(CAP_USD), "--progress", "none"]  # fmt: skip
    with ScriptedServer(script(failures)) as server:
        done = run_cli(root, server, *args)
        paid = server.billed_usd()
    assert done.returncode == 3, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert 0 < paid <= CAP_USD, f"billed ${paid:.5f} for a ${CAP_USD} cap"
    with sqlite3.connect(root / ".runner" / "runs.sqlite3") as db:
        counted = db.execute("SELECT COALESCE(SUM(cost_usd), 0) FROM model_calls").fetchone()[0]
    assert counted >= paid - 1e-9, (counted, paid)  # the store counts at least what was billed
