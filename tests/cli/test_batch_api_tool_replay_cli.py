"""A resumed ``--via batch-api`` row replays its tool results, so its requests are the same and
nothing is paid for twice, even when a tool's output changes from one run to the next.

The rows' python tool prints a random number and the time, and appends to a file in the
workspace and prints how many lines it holds: run again, each would make a different next
request. The command is killed with SIGKILL once the second round's batch exists (created, or its
output being served), then run again: no round is submitted twice and
no line billed twice, and the workspace holds one line per tool call (the replayed calls did
not run again; the workspace the earlier process left is kept). When that workspace is gone
(another machine, a wiped disk), the tools run again in a fresh workspace, and the run says so.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runner.model.batch_endpoints import BatchBehaviour
from runner.model.server import ScriptedServer
from tests.cli.batch_api_project import batch_inputs, chat_calls, command, records, via_api, wait_until
from tests.cli.rounds_project import AGENT, ROUNDS, TASK, USAGE, numbers
from tests.support.project import sandbox_project

pytestmark = pytest.mark.timeout(300)
ROWS = 3
CODE = (
    "import random, time\n"
    "with open('log.txt', 'a') as log: log.write('x\\n')\n"
    "print(42, random.random(), time.time_ns(), len(open('log.txt').read().splitlines()))"
)
SCRIPT: dict[str, Any] = {
    "fallback": None,
    "rules": [
        {"name": "tool", "when": {"last_role": "user", "last_message": "^Compute (\\d+)"},
         "reply": {"tool_calls": [{"name": "python", "arguments": {"code": CODE}}], "usage": USAGE}},
        {"name": "unparsable", "when": {"last_role": "tool"}, "reply": {"content": "forty-two", "usage": USAGE}},
        {"name": "repaired", "when": {"last_role": "user", "last_message": "must be JSON"},
         "reply": {"content": "{\"answer\": 42}", "usage": USAGE}},
    ],
}  # fmt: skip


@pytest.fixture
def project() -> Iterator[Path]:
    with sandbox_project("replay", {"agents.d/calc.yaml": AGENT, "tasks.d/compute.yaml": TASK}) as root:
        yield root


def _killed_in_the_second_round(root: Path, server: ScriptedServer, point: str) -> tuple[list[str], dict[str, str]]:
    source, out, journal = numbers(root, ROWS), root / "out.jsonl", root / "journal.sqlite3"
    argv, env = command(root, server, "compute", *via_api(source, out, "--journal", str(journal)))
    process = subprocess.Popen(argv, cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_until(lambda: server.batches.holding(point) > 0), f"never reached {point} in the second round"
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
    server.batches.behaviour = BatchBehaviour(polls=1)
    server.batches.release()
    return argv, env


def _workspaces(root: Path) -> dict[str, Path]:
    return {path.name.rpartition("-")[2]: path for path in (root / ".runner" / "workspaces").iterdir()}


BEHAVIOURS = {
    "created": BatchBehaviour(polls=1, hold=frozenset({"created"}), hold_after=2),
    "output": BatchBehaviour(polls=1, hold=frozenset({"output"}), hold_after=2),
}


@pytest.mark.parametrize("point", sorted(BEHAVIOURS))
def test_a_resumed_row_replays_its_tool_results_and_pays_nothing_twice(project: Path, point: str) -> None:
    with ScriptedServer(SCRIPT, batch=BEHAVIOURS[point]) as server:
        argv, env = _killed_in_the_second_round(project, server, point)
        resumed = subprocess.run(argv, cwd=project, env=env, capture_output=True, text=True, timeout=240)
        assert resumed.returncode == 0, resumed.stderr
        batches = batch_inputs(server)
        assert len(batches) == ROUNDS, [len(b) for b in batches]  # the second round was not submitted again
        assert len(server.billed) == ROWS * ROUNDS and chat_calls(server) == []  # nothing answered or paid twice
        second = {line["custom_id"] for line in batches[1]}
        assert len(second) == ROWS
    rows = records(project / "out.jsonl")
    assert all(r["status"] == "done" and r["output"] == {"answer": 42} for r in rows.values())
    assert not any(r["warnings"] for r in rows.values())
    for workspace in _workspaces(project).values():  # one tool call per row: the replayed one did not run again
        assert (workspace / "log.txt").read_text() == "x\n"


def test_a_workspace_gone_before_the_resume_means_the_tools_run_again_and_the_run_says_so(project: Path) -> None:
    with ScriptedServer(SCRIPT, batch=BEHAVIOURS["output"]) as server:
        argv, env = _killed_in_the_second_round(project, server, "output")
        for workspace in _workspaces(project).values():
            shutil.rmtree(workspace)  # another machine, or a wiped disk
        resumed = subprocess.run(argv, cwd=project, env=env, capture_output=True, text=True, timeout=240)
        assert resumed.returncode == 0, resumed.stderr
        assert len(batch_inputs(server)) == ROUNDS + 1  # the second round again: the tool printed something else
    rows = records(project / "out.jsonl")
    assert all(r["status"] == "done" and r["output"] == {"answer": 42} for r in rows.values())
    assert all(any("tool results are not replayed" in w for w in r["warnings"]) for r in rows.values())
    for workspace in _workspaces(project).values():  # a fresh workspace: one tool call of this attempt
        assert (workspace / "log.txt").read_text() == "x\n"


def test_a_tool_failure_is_replayed_as_the_same_failure(project: Path) -> None:
    script = json.loads(json.dumps(SCRIPT))
    script["rules"][0]["reply"]["tool_calls"][0]["name"] = "no_such_tool"  # an invalid call: its error is replayed too
    with ScriptedServer(script, batch=BEHAVIOURS["output"]) as server:
        argv, env = _killed_in_the_second_round(project, server, "output")
        resumed = subprocess.run(argv, cwd=project, env=env, capture_output=True, text=True, timeout=240)
        assert resumed.returncode == 0, resumed.stderr
        assert len(batch_inputs(server)) == ROUNDS and len(server.billed) == ROWS * ROUNDS
