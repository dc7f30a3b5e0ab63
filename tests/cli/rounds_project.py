"""A project whose agent needs three rounds per row (shared by the batch-api CLI tests): a
python tool call run in the real sandbox, an answer its output schema refuses, the repaired one."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from tests.cli.batch_api_project import write_rows
from tests.support.project import sandbox_project

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


def rounds_project() -> contextlib.AbstractContextManager[Path]:
    """The project, under /tmp (its tools run in the sandbox)."""
    return sandbox_project("rounds", {"agents.d/calc.yaml": AGENT, "tasks.d/compute.yaml": TASK})


def numbers(root: Path, count: int) -> Path:
    return write_rows(root / "numbers.jsonl", [{"id": f"r{i}", "n": i} for i in range(1, count + 1)])
