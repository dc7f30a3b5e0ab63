"""One batch at a time per output file, and never over its own input, a journal or a run store.

Two real `runner batch` processes race for one ``--output``: the second is refused (exit 2,
naming the first batch's input and journal) and the first one's records survive.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from runner.model.server import ScriptedServer
from tests.support.project import runner_env, write_project

PROJECT = {
    "agents.d/echo.yaml": "apiVersion: runner/v1\nkind: Agent\nname: echo\nmodel: {id: gpt-4o-mini}\nsystem_prompt: Echo.\n",
    "tasks.d/ask.yaml": (
        "apiVersion: runner/v1\nkind: Task\nname: ask\ninputs: {q: {type: string}}\nagent: echo\n"
        'goal: "{{ inputs.q }}"\n'
    ),
}


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return write_project(tmp_path, {**PROJECT, "a.csv": "q\nalpha-1\nalpha-2\nalpha-3\n", "b.csv": "q\nbravo-1\nbravo-2\n"})


@pytest.fixture
def slow_server() -> Iterator[ScriptedServer]:
    with ScriptedServer({"fallback": {"content": "ok", "latency_seconds": 1.0}}) as srv:
        yield srv


def argv(source: str, output: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "runner", "batch", "ask", "--input", source, "--output", output,
            "--concurrency", "1", "--progress", "none", *extra]  # fmt: skip


def environment(server: ScriptedServer) -> dict[str, str]:
    return runner_env(server, key="sk-test-lock")


def run(root: Path, server: ScriptedServer, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), cwd=root, env=environment(server), capture_output=True, text=True, timeout=300)


def start(root: Path, server: ScriptedServer, *args: str) -> subprocess.Popen[str]:
    """Start a batch and return once its first model call arrived (so it holds the output)."""
    with (root / "first.log").open("w") as log:  # a file, not a pipe: nothing to drain or leak
        process = subprocess.Popen(list(args), cwd=root, env=environment(server), stdout=log, stderr=log, text=True)
    deadline = time.monotonic() + 120
    while not server.requests:
        assert process.poll() is None, (root / "first.log").read_text()
        assert time.monotonic() < deadline, "the first batch never called the model"
        time.sleep(0.05)
    return process


def goals(server: ScriptedServer) -> str:
    return json.dumps([r.body for r in server.requests])


def test_a_second_batch_on_the_same_output_is_refused_naming_the_first(root: Path, slow_server: ScriptedServer) -> None:
    first = start(root, slow_server, *argv("a.csv", "out.jsonl"))
    try:
        second = run(root, slow_server, *argv("b.csv", str(root / "sub" / ".." / "out.jsonl")))  # another spelling
        assert second.returncode == 2, second.stderr
        assert "another batch" in second.stderr and "writing this output file" in second.stderr
        assert str(root / "a.csv") in second.stderr and ".runner/batches/ask-" in second.stderr  # input and journal
        assert "--output" in second.stderr and "Traceback" not in second.stderr
        first.wait(timeout=300)
    finally:
        first.kill()
    assert first.returncode == 0, (root / "first.log").read_text()
    rows = [json.loads(line)["row"] for line in (root / "out.jsonl").read_text().splitlines()]
    assert rows == [1, 2, 3]
    assert "bravo" not in goals(slow_server)  # the refused batch ran nothing
    again = run(root, slow_server, *argv("b.csv", "out.jsonl"))  # once the first has ended, the file is free
    assert again.returncode == 0, again.stderr


def test_the_lock_goes_with_a_killed_batch(root: Path, slow_server: ScriptedServer) -> None:
    first = start(root, slow_server, *argv("a.csv", "out.jsonl"))
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=60)
    second = run(root, slow_server, *argv("b.csv", "out.jsonl"))
    assert second.returncode == 0, second.stderr


def test_a_batch_on_a_different_output_runs_alongside(root: Path, slow_server: ScriptedServer) -> None:
    first = start(root, slow_server, *argv("a.csv", "out-a.jsonl"))
    try:
        second = run(root, slow_server, *argv("b.csv", "out-b.jsonl"))
        assert second.returncode == 0, second.stderr
        assert first.wait(timeout=300) == 0
    finally:
        first.kill()


# --- outputs that would destroy something -----------------------------------------------------


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer({"fallback": "ok"}) as srv:
        yield srv


def test_output_equal_to_the_input_is_refused(root: Path, server: ScriptedServer) -> None:
    before = (root / "a.csv").read_bytes()
    os.link(root / "a.csv", root / "hard.csv")
    for output in ("a.csv", "./a.csv", "hard.csv"):
        result = run(root, server, *argv("a.csv", output))
        assert result.returncode == 2, result.stderr
        assert "is the input file" in result.stderr
    assert (root / "a.csv").read_bytes() == before and server.requests == []


def test_output_equal_to_the_journal_is_refused(root: Path, server: ScriptedServer) -> None:
    result = run(root, server, *argv("a.csv", "state.jsonl", "--journal", "state.jsonl"))
    assert result.returncode == 2 and "this batch's journal" in result.stderr, result.stderr
    assert server.requests == []


def test_output_over_another_batchs_journal_or_the_run_store_is_refused(root: Path, server: ScriptedServer) -> None:
    done = run(root, server, *argv("a.csv", "out.jsonl"))
    assert done.returncode == 0, done.stderr
    (journal,) = (root / ".runner" / "batches").glob("ask-*.sqlite3")
    store = root / ".runner" / "runs.sqlite3"
    calls = len(server.requests)
    for target in (journal, store):
        before = target.read_bytes()
        result = run(root, server, *argv("b.csv", str(target), "--output-format", "jsonl"))
        assert result.returncode == 2, result.stderr
        assert "is an SQLite database" in result.stderr
        assert target.read_bytes() == before
    with sqlite3.connect(journal) as db:
        assert db.execute("SELECT COUNT(*) FROM rows WHERE status = 'done'").fetchone()[0] == 3
    assert len(server.requests) == calls


def test_a_planted_lock_symlink_is_not_followed(root: Path, server: ScriptedServer) -> None:
    victim = root / "victim.txt"
    victim.write_text("precious")
    (root / ".out.jsonl.lock").symlink_to(victim)
    result = run(root, server, *argv("a.csv", "out.jsonl"))
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert victim.read_text() == "precious" and server.requests == []


def test_an_output_that_is_not_a_regular_file_is_refused(root: Path, server: ScriptedServer) -> None:
    """``--output /dev/stdout`` would have the atomic rename replace the device's symlink."""
    os.mkfifo(root / "pipe.jsonl")
    (root / "link.jsonl").symlink_to(root / "elsewhere.jsonl")
    for output in ("/dev/stdout", "/dev/null", str(root / "pipe.jsonl"), str(root / "link.jsonl")):
        result = run(root, server, *argv("a.csv", output, "--output-format", "jsonl"))
        assert result.returncode == 2, (output, result.stderr)
        assert "not a regular file" in result.stderr
    assert Path("/dev/stdout").is_symlink() and Path("/dev/null").is_char_device()
    assert not (root / "elsewhere.jsonl").exists() and server.requests == []
