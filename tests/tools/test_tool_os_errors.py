"""A tool whose I/O fails on what the model asked for is an observation, not the end of the run:
``current_time`` with a time zone that names a directory or is too long for a file name, a
custom Python tool that opens a file that is not there. Before, the ``OSError`` reached the
CLI, which ended the run as a configuration error (exit 2) and echoed the whole argument."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from runner.model.server import ScriptedServer

REPO = Path(__file__).resolve().parents[2]
AGENT = """\
apiVersion: runner/v1
kind: Agent
name: a
model: {id: scripted}
tools: [current_time, word_count]
stuck: {max_repeats: 10, max_invalid_calls: 10}
"""
TOOL = "apiVersion: runner/v1\nkind: Tool\nname: word_count\ntype: python\npython: {function: 'tests.tools.sample_tools:word_count'}\n"


def test_os_errors_of_tools_become_observations(tmp_path: Path) -> None:
    root = tmp_path / "p"
    for folder in ("agents.d", "tasks.d", "tools.d"):
        (root / folder).mkdir(parents=True)
    (root / "agents.d" / "a.yaml").write_text(AGENT)
    (root / "tools.d" / "word_count.yaml").write_text(TOOL)
    (root / "tasks.d" / "t.yaml").write_text("apiVersion: runner/v1\nkind: Task\nname: t\nagent: a\ngoal: What time is it?\n")
    long_zone = "Z" * 5000
    calls = [("current_time", {"timezone": "America"}), ("current_time", {"timezone": long_zone}), ("word_count", {"path": "missing.txt"})]
    script = {"rules": [{"times": 1, "reply": {"tool_calls": [{"name": n, "arguments": a}]}} for n, a in calls], "fallback": "Noon."}
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI", "OTEL_"))}
    with ScriptedServer(script) as server:
        env.update(PYTHONPATH=str(REPO), OPENAI_BASE_URL=server.base_url, OPENAI_API_KEY="sk-test-tool-os-errors")
        done = subprocess.run([sys.executable, "-m", "runner", "run", "t", "--json"], cwd=root, env=env, capture_output=True,
                              text=True, timeout=120, stdin=subprocess.DEVNULL)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    results = [e for e in events if e.get("event") == "tool_call"]
    assert [(e["name"], e["status"]) for e in results] == [("current_time", "error"), ("current_time", "error"), ("word_count", "error")]
    assert "unknown time zone 'America'" in results[0]["output_excerpt"]
    assert "unknown time zone 'ZZZ" in results[1]["output_excerpt"] and long_zone not in results[1]["output_excerpt"] + done.stderr
    assert "tool 'word_count' failed: No such file or directory" in results[2]["output_excerpt"]
    assert "Traceback" not in done.stderr
