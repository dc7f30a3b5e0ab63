"""Money caps hold against honest endpoints whatever the prompt holds: the real CLI, the real
openai SDK, the loopback server reporting the true token count of every request.

"Honest" is the scripted server's ``tokenizer`` setting: ``o200k_base`` counts like OpenAI
(gpt-4o-mini's tokenizer, OpenAI's framing); ``utf8_bytes`` is the worst honest tokenizer,
one token per byte (digits spelled one by one, as SmolLM2, Llama 2 or Qwen do). Billed is
recomputed here from the requests the server received, at the shipped prices.
"""

from __future__ import annotations

import json
import random
import subprocess
from pathlib import Path
from typing import Any

import pytest

from runner.model.server import ScriptedServer
from tests.support.project import run_cli, write_project

pytestmark = pytest.mark.timeout(300)

AGENTS = """\
apiVersion: runner/v1
kind: Agent
name: openai_reader
model: {id: gpt-4o-mini, max_tokens: 100}
system_prompt: You add numbers with the calculator.
tools: [calculator]
stuck: {max_repeats: 50}
---
apiVersion: runner/v1
kind: Agent
name: qwen_reader
model: {id: qwen-plus, max_tokens: 100}
system_prompt: You add numbers with the calculator.
tools: [calculator]
stuck: {max_repeats: 50}
"""
TASKS = """\
apiVersion: runner/v1
kind: Task
name: {name}
inputs:
  data: {{type: string}}
agent: {agent}
goal: "Add up these figures: {{{{ inputs.data }}}}"
"""
CALLS = 40


@pytest.fixture
def project(tmp_path: Path) -> Path:
    tasks = [TASKS.format(name=n, agent=a) for n, a in (("sum_openai", "openai_reader"), ("sum_qwen", "qwen_reader"))]
    return write_project(tmp_path / "project", {"agents.d/agents.yaml": AGENTS, "tasks.d/tasks.yaml": "---\n".join(tasks)})


def numeric_goal(chars: int = 3000, seed: int = 1) -> str:
    """Single digits and commas: about one token per character for every tokenizer."""
    rnd = random.Random(seed)
    return ",".join(rnd.choice("0123456789") for _ in range(chars // 2))[:chars]


def calculator_script(tokenizer: str) -> dict[str, Any]:
    """A model that keeps calling the calculator (a different sum each time), until stopped."""
    rules = [
        {"name": f"call{i}", "times": 1,
         "reply": {"tool_calls": [{"name": "calculator", "arguments": {"expression": f"{i} + {i * 7}"}}]}}
        for i in range(CALLS)
    ]  # fmt: skip
    return {"tokenizer": tokenizer, "rules": rules, "fallback": "Done."}


def runner(root: Path, server: ScriptedServer, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(root, server, *args, key="sk-test-estimates", timeout=240)


@pytest.mark.parametrize(
    ("task", "tokenizer", "cap"),
    [
        ("sum_openai", "o200k_base", 0.002),  # exact estimate: ~3,000 prompt tokens a call
        ("sum_qwen", "utf8_bytes", 0.006),  # byte bound against a one-token-per-byte endpoint
    ],
)
def test_a_numeric_goal_never_bills_above_the_money_cap(project: Path, task: str, tokenizer: str, cap: float) -> None:
    with ScriptedServer(calculator_script(tokenizer)) as server:
        result = runner(project, server, "run", task, "--input", f"data={numeric_goal()}", "--max-cost-usd", str(cap),
                        "--no-report", "--json")  # fmt: skip
        billed = server.billed_usd()
        calls = len(server.requests)
    assert result.returncode == 3, result.stderr  # the cap, not the script, ended the run
    assert 2 <= calls < CALLS
    assert billed <= cap, f"billed {billed:.6f} USD against a {cap} USD cap in {calls} calls"
    finished = json.loads(result.stdout.splitlines()[-1])
    assert finished["status"] == "capped" and "max_cost_usd" in json.dumps(finished)
    assert finished["cost_usd"] == pytest.approx(billed, rel=1e-6)  # the runner recorded what was billed


def test_a_numeric_batch_never_bills_above_the_batch_cap(project: Path) -> None:
    rows = project / "rows.jsonl"
    rows.write_text("".join(json.dumps({"id": i, "data": numeric_goal(seed=i)}) + "\n" for i in range(24)))
    script = {"tokenizer": "o200k_base", "fallback": {"tool_calls": [], "content": "Done."}}
    with ScriptedServer(script) as server:
        result = runner(project, server, "batch", "sum_openai", "--input", str(rows), "--output",
                        str(project / "out.jsonl"), "--id-column", "id", "--concurrency", "8",
                        "--max-cost-usd", "0.004", "--progress", "none", "--json")  # fmt: skip
        billed = server.billed_usd()
    assert result.returncode == 3, result.stderr
    summary = json.loads(result.stdout)
    assert summary["counts"]["not_run"] > 0
    assert billed <= 0.004, f"billed {billed:.6f} USD against a 0.004 USD cap"
