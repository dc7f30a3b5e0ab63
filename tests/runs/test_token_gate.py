"""A batch's rate gate needs tight prompt counts only when it limits tokens per minute: a gate
without a token limit does not load a tokenizer (about 90 MB for OpenAI's encodings)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from runner.batch.ratelimit import SharedRateLimiter

REPO = Path(__file__).resolve().parents[2]
RUN = """
import asyncio, sys
from pathlib import Path
from runner.batch.ratelimit import SharedRateLimiter
from runner.config.project import load_project_or_raise
from runner.model.factory import ModelPool
from runner.model.scripted import ScriptedModel
from runner.runs.execute import execute_task
from runner.runs.options import RunOptions

project = load_project_or_raise(Path(sys.argv[1]))
gate = SharedRateLimiter(requests_per_minute=600, tokens_per_minute=float(sys.argv[2]) or None)
model = ScriptedModel({"tokenizer": "utf8_bytes", "fallback": {"content": "4"}})
options = RunOptions(write_report=False, rate_gate=gate)
result = asyncio.run(execute_task(project, project.task_for("sum"), {"a": "2"}, options, pool=ModelPool(fixed=model)))
assert result.status == "completed", result.error
print("tiktoken" in sys.modules)
"""


def tokenizer_loaded(project_dir: Path, tokens_per_minute: float) -> bool:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", RUN, str(project_dir), str(tokens_per_minute)],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1] == "True"


def test_a_gate_without_a_token_limit_loads_no_tokenizer(project_dir: Path) -> None:
    assert not tokenizer_loaded(project_dir, 0)


def test_a_tokens_per_minute_limit_counts_prompts_exactly(project_dir: Path) -> None:
    assert tokenizer_loaded(project_dir, 1_000_000)


@pytest.mark.parametrize(("tpm", "limits"), [(None, False), (1000.0, True)])
def test_the_gate_says_whether_it_limits_tokens(tpm: float | None, limits: bool) -> None:
    assert SharedRateLimiter(requests_per_minute=60, tokens_per_minute=tpm).limits_tokens is limits
