"""``runner batch --via batch-api`` with a tool-using agent: every row's k-th model call goes
out in the k-th provider batch, the tools run in the real sandbox between rounds, checks and
repair turns take rounds of their own, caps hold at batch prices, rounds split at the limits,
and the wall-clock cap holds while waiting on the provider."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runner.model.batch_endpoints import BatchBehaviour
from runner.model.server import ScriptedServer
from tests.cli.batch_api_project import batch_inputs, chat_calls, live_cost, records, row_of, run, via_api, write_rows

pytestmark = pytest.mark.timeout(300)
AGENT = """\
apiVersion: runner/v1
kind: Agent
name: calc
model: {id: gpt-4o-mini, max_tokens: 50}
system_prompt: Compute with the python tool, then answer with JSON.
tools: [python]
sandbox: {mode: bwrap, wall_seconds: 30}
checks: {max_repairs: 1}
caps: {max_steps: 6}
"""
TASK = """\
apiVersion: runner/v1
kind: Task
name: compute
inputs:
  n: {type: integer}
agent: calc
goal: "Compute {{ inputs.n }} times 6."
output_schema:
  type: object
  required: [answer]
  properties: {answer: {type: integer}}
caps: {max_cost_usd: 0.01}
"""
USAGE = {"prompt_tokens": 100, "completion_tokens": 10}
SCRIPT: dict[str, Any] = {
    "fallback": None,
    "rules": [
        {"name": "tool", "when": {"last_role": "user", "last_message": "^Compute (\\d+)"},
         "reply": {"tool_calls": [{"name": "python", "arguments": {"code": "import sys; print(7 * 6)"}}], "usage": USAGE}},
        {"name": "unparsable", "when": {"last_role": "tool"}, "reply": {"content": "forty-two", "usage": USAGE}},
        {"name": "repaired", "when": {"last_role": "user", "last_message": "must be JSON"},
         "reply": {"content": "{\"answer\": 42}", "usage": USAGE}},
    ],
}  # fmt: skip
ROUNDS = 3  # the tool call, an answer the output schema refuses, the repaired answer


@pytest.fixture
def project() -> Iterator[Path]:
    """A project under /tmp: its workspaces must be reachable by the sandbox user."""
    root = Path(tempfile.mkdtemp(prefix="runner-rounds-", dir="/tmp"))
    root.chmod(0o755)
    (root / "agents.d").mkdir()
    (root / "tasks.d").mkdir()
    (root / "agents.d/calc.yaml").write_text(AGENT)
    (root / "tasks.d/compute.yaml").write_text(TASK)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def numbers(root: Path, count: int) -> Path:
    return write_rows(root / "numbers.jsonl", [{"id": f"r{i}", "n": i} for i in range(1, count + 1)])


def test_each_round_of_every_row_is_one_provider_batch(project: Path) -> None:
    source, out = numbers(project, 4), project / "out.jsonl"
    with ScriptedServer(SCRIPT, batch=BatchBehaviour(polls=2)) as server:
        result = run(project, server, "compute", *via_api(source, out, "--json"))
        assert result.returncode == 0, result.stderr
        batches = batch_inputs(server)
        assert chat_calls(server) == []  # nothing went live
    assert len(batches) == ROUNDS
    for lines in batches:  # every row's k-th call in batch k, once
        assert sorted(row_of(line) for line in lines) == ["r1", "r2", "r3", "r4"]
    first, second, third = ([line["body"]["messages"] for line in lines] for lines in batches)
    assert all(m[-1]["role"] == "user" and m[-1]["content"].startswith("Compute") for m in first)
    assert all(m[-1]["role"] == "tool" and "stdout:\n42" in m[-1]["content"] for m in second)  # the sandbox ran it
    assert all(m[-1]["role"] == "user" and "must be JSON" in m[-1]["content"] for m in third)  # the repair turn
    rows = records(out)
    for record in rows.values():
        assert record["status"] == "done" and record["output"] == {"answer": 42}
        assert record["cost_usd"] == pytest.approx(ROUNDS * live_cost(100, 10) / 2)  # at the batch price
    assert json.loads(result.stdout)["provider_pending"] == []


def test_a_round_larger_than_the_limits_is_split_over_several_batches(project: Path) -> None:
    source, out = numbers(project, 5), project / "out.jsonl"
    with ScriptedServer(SCRIPT, batch=BatchBehaviour(polls=1, max_requests=2)) as server:
        result = run(project, server, "compute", *via_api(source, out, "--batch-max-requests", "2"))
        assert result.returncode == 0, result.stderr
        batches = batch_inputs(server)
    assert [len(lines) for lines in batches] == [2, 2, 1] * ROUNDS
    for k in range(ROUNDS):  # round k's three batches hold every row once
        assert sorted(row_of(line) for lines in batches[3 * k : 3 * k + 3] for line in lines) == [f"r{i}" for i in range(1, 6)]
    assert {r["status"] for r in records(out).values()} == {"done"}


def test_a_round_is_split_by_the_size_of_its_input_file(project: Path) -> None:
    (project / "tasks.d/compute.yaml").write_text(TASK + "batch_api: {max_file_bytes: 2500}\n")
    source, out = numbers(project, 4), project / "out.jsonl"
    with ScriptedServer(SCRIPT, batch=BatchBehaviour(polls=1)) as server:
        result = run(project, server, "compute", *via_api(source, out))
        assert result.returncode == 0, result.stderr
        files = [f.content for f in server.batches.files.values() if f.purpose == "batch"]
    assert len(files) > ROUNDS and all(len(content) <= 2500 for content in files)
    assert {r["status"] for r in records(out).values()} == {"done"}


def test_a_batch_cost_cap_holds_at_batch_prices(project: Path) -> None:
    """The cap fits every row's worst cases at the batch price, not at the live one: every row
    finishes, and what was spent stays under the cap."""
    source, out = numbers(project, 2), project / "out.jsonl"
    with ScriptedServer(SCRIPT, batch=BatchBehaviour(polls=1)) as server:
        result = run(project, server, "compute", *via_api(source, out, "--max-cost-usd", "0.00012", "--json"))
        assert result.returncode == 0, result.stderr
        billed = [usage for _, usage in server.billed]
    summary = json.loads(result.stdout)
    assert summary["counts"]["done"] == 2 and summary["cost_usd"] <= 0.00012
    assert summary["cost_usd"] == pytest.approx(sum(live_cost(u["prompt_tokens"], u["completion_tokens"]) / 2 for u in billed))


def test_a_batch_cost_cap_too_small_for_every_row_stops_the_batch_without_passing_it(project: Path) -> None:
    source, out = numbers(project, 6), project / "out.jsonl"
    with ScriptedServer(SCRIPT, batch=BatchBehaviour(polls=1)) as server:
        result = run(project, server, "compute", *via_api(source, out, "--max-cost-usd", "0.00012", "--json"))
    assert result.returncode == 3, result.stderr
    summary = json.loads(result.stdout)
    assert summary["cost_usd"] <= 0.00012 and summary["stop_kind"] == "max_cost_usd"
    assert summary["counts"]["done"] >= 1 and summary["counts"]["not_run"] >= 1


def test_the_wall_clock_cap_cancels_the_batch_and_keeps_what_it_answered(project: Path) -> None:
    source, out = numbers(project, 4), project / "out.jsonl"
    with ScriptedServer(SCRIPT, batch=BatchBehaviour(polls=10_000, partial=2)) as server:
        result = run(project, server, "compute", *via_api(source, out, "--max-wall-seconds", "3", "--json"))
        assert result.returncode == 3, result.stderr
        (batch,) = server.batches.batches.values()
        billed = len(server.billed)
    assert batch.status == "cancelled" and billed == 2  # the two lines it answered before it ended
    summary = json.loads(result.stdout)
    assert summary["stop_kind"] == "max_wall_seconds" and "batch cap max_wall_seconds=3 reached" in summary["stop_reason"]
    rows = records(out)
    assert {r["status"] for r in rows.values()} == {"not_run"}
    spent = sorted(r["cost_usd"] for r in rows.values())  # the answered calls at what they used, the others nothing
    assert spent == pytest.approx([0, 0, live_cost(100, 10) / 2, live_cost(100, 10) / 2])
