"""Cache-aware prompts end to end: the real CLI, the real openai SDK, the loopback server.

Rows of a batch send byte-identical prefixes (everything but the per-row goal), the prompt
cache key goes where the agent says, and cached input tokens are billed at the cached
price and shown as a hit rate in the run and batch reports."""

from __future__ import annotations

import csv
import itertools
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from runner.model.server import ScriptedServer
from tests.support.project import run_cli, write_project

REPO = Path(__file__).resolve().parents[2]
SYSTEM = "You triage support tickets into hardware, software or billing. Answer with the category only."
SUBJECTS = ["printer 7 is jammed", "the invoice total is wrong", "app crashes on start"]
AGENT = """\
apiVersion: runner/v1
kind: Agent
name: triager
model: {{id: gpt-4o-mini, max_tokens: 20, retries: 0{setting}}}
system_prompt: "{system}"
examples:
  - {{input: "Triage this ticket: the mouse is broken", output: hardware}}
  - {{input: "Triage this ticket: charged twice", output: billing}}
tools: [calculator]
"""
TASK = """\
apiVersion: runner/v1
kind: Task
name: triage
inputs:
  subject: {type: string}
agent: triager
goal: "Triage this ticket: {{ inputs.subject }}"
"""
USAGE = {"prompt_tokens": 1000, "completion_tokens": 10, "cached_tokens": 600}


def make_project(root: Path, setting: str = "") -> Path:
    write_project(root, {"agents.d/triager.yaml": AGENT.format(setting=setting, system=SYSTEM), "tasks.d/triage.yaml": TASK})
    with open(root / "rows.csv", "w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(["id", "subject"])
        writer.writerows([f"T{i}", subject] for i, subject in enumerate(SUBJECTS))
    return root


def runner(root: Path, server: ScriptedServer, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(root, server, *args, key="sk-test-cache")


def batch(root: Path, server: ScriptedServer) -> subprocess.CompletedProcess[str]:
    args = ["batch", "triage", "--input", "rows.csv", "--output", "out.jsonl", "--id-column", "id", "--progress", "none"]
    return runner(root, server, *args)


def common_prefix(a: str, b: str) -> str:
    return a[: next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))]


@pytest.mark.parametrize("setting", ["", ", prompt_cache_key: true", ", prompt_cache_key: team-a"])
def test_rows_of_a_batch_send_byte_identical_prefixes(tmp_path: Path, setting: str) -> None:
    root = make_project(tmp_path / "project", setting)
    with ScriptedServer({"fallback": {"content": "hardware"}}) as server:
        done = batch(root, server)
        bodies = [request.body for request in server.requests if request.path.endswith("/chat/completions")]
    assert done.returncode == 0, done.stderr
    assert len(bodies) == len(SUBJECTS)
    encoded = [json.dumps(body, ensure_ascii=False) for body in bodies]
    tools = json.dumps(bodies[0]["tools"], ensure_ascii=False)
    for first, second in itertools.pairwise(encoded):
        shared = common_prefix(first, second)
        for static in (SYSTEM, tools, "the mouse is broken", "charged twice", '"content": "Triage this ticket: '):
            assert static in shared
        assert not any(subject in shared for subject in SUBJECTS)  # the per-row content comes after
    for body in bodies:
        assert list(body)[-1] == "messages" and body["messages"][-1]["role"] == "user"
        assert [m["role"] for m in body["messages"]] == ["system", "user", "assistant", "user", "assistant", "user"]
    keys = {body.get("prompt_cache_key") for body in bodies}
    if not setting:
        assert keys == {None}, "a loopback endpoint is not known to accept the field: nothing is sent"
    elif "true" in setting:
        (key,) = keys
        assert re.fullmatch(r"runner-[0-9a-f]{24}", str(key))
    else:
        assert keys == {"team-a"}


def test_cached_tokens_are_billed_at_the_cached_price_and_shown_as_a_hit_rate(tmp_path: Path) -> None:
    root = make_project(tmp_path / "project")
    with ScriptedServer({"fallback": {"content": "hardware", "usage": USAGE}}) as server:
        done = runner(root, server, "run", "triage", "-i", f"subject={SUBJECTS[0]}")
    assert done.returncode == 0, done.stderr
    assert "(60.0% of input from the prompt cache)" in done.stderr
    (report_dir,) = (root / "reports/triage").iterdir()
    report = json.loads((report_dir / "report.json").read_text())
    total = report["usage"]["total"]
    expected = (400 * 0.15 + 600 * 0.075 + 10 * 0.60) / 1_000_000  # gpt-4o-mini: uncached, cached, output
    assert total["cached_input_tokens"] == 600 and total["input_tokens"] == 1000
    assert total["cost_usd"] == pytest.approx(expected)
    markdown = (report_dir / "report.md").read_text()
    assert "**Prompt cache:** 60.0% of 1,000 input tokens" in markdown
    assert "| gpt-4o-mini | 1 | 1,000 | 600 | 60.0% | 10 |" in markdown
    assert "60.0% of 1,000 input tokens" in (report_dir / "report.html").read_text()


def test_the_batch_report_shows_the_hit_rate(tmp_path: Path) -> None:
    root = make_project(tmp_path / "project")
    rules: list[dict[str, Any]] = [
        {"when": {"last_message": "printer"}, "reply": {"content": "hardware", "usage": {**USAGE, "cached_tokens": 0}}},
        {"reply": {"content": "software", "usage": USAGE}},
    ]
    with ScriptedServer({"rules": rules}) as server:
        done = batch(root, server)
    assert done.returncode == 0, done.stderr
    (directory,) = (root / "reports/triage").glob("batch-*")
    report = json.loads((directory / "batch_report.json").read_text())
    assert report["input_tokens"] == 3000 and report["cached_input_tokens"] == 1200
    assert report["cache_hit_rate"] == pytest.approx(0.4)
    assert report["cost_usd"] == pytest.approx((1000 * 0.15 + 10 * 0.6 + 2 * (400 * 0.15 + 600 * 0.075 + 10 * 0.6)) / 1e6)
    assert "Prompt cache: 40.0% of 3,000 input tokens" in (directory / "batch_report.md").read_text()
    assert "tokens (40.0% of input from the prompt cache)" in done.stdout


def test_no_input_tokens_means_no_hit_rate(tmp_path: Path) -> None:
    from runner.batch.summary import render_markdown

    report = {
        "batch_id": "b", "task": "t", "input": {"path": "x", "sha256": None}, "rows": 0, "counts": {},
        "cost_usd": 0.0, "tokens": 0, "input_tokens": 0, "cached_input_tokens": 0, "cache_hit_rate": None,
        "cost_per_row_usd": {"rows": 0}, "slowest_rows": [], "errors_by_kind": {}, "not_run": {},
    }  # fmt: skip
    assert "Prompt cache" not in render_markdown(report)
