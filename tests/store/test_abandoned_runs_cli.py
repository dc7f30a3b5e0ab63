"""A run whose process is gone is not shown ``running`` for ever, through the real CLI: a
``runner run`` killed (SIGKILL) in the middle of a model call, or one that could not record how
it ended because another process held the run store locked, is recorded as failed
(interrupted, naming the process and how to resume) the next time the store is opened, on
both backends; a run whose process lives, or ran on another machine, stays ``running``; and
resuming the interrupted run completes it."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runner.model.server import ScriptedServer
from runner.store.connect import open_database
from tests.support.project import run_cli, runner_env, write_project

pytestmark = pytest.mark.timeout(300)
PROJECT = {
    "agents.d/a.yaml": "apiVersion: runner/v1\nkind: Agent\nname: answerer\nmodel: {id: gpt-4o-mini, max_tokens: 100, retries: 0}\n",
    "tasks.d/ask.yaml": "apiVersion: runner/v1\nkind: Task\nname: ask\nagent: answerer\ngoal: Say hello.\n",
}
RUN_ID = "abandoned-1"
ARGS = ("run", "ask", "--run-id", RUN_ID, "--no-report")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return write_project(tmp_path / "project", PROJECT)


def store_row(target: str | Path, run_id: str = RUN_ID) -> dict[str, Any] | None:
    db = open_database(target)
    try:
        return db.row("SELECT * FROM runs WHERE run_id = ?", (run_id,))
    finally:
        db.close()


@contextlib.contextmanager
def running(root: Path, server: ScriptedServer, env: dict[str, str]) -> Iterator[subprocess.Popen[str]]:
    """``runner run`` started, its model call in flight (so its run row says ``running``)."""
    process = subprocess.Popen([sys.executable, "-m", "runner", *ARGS], cwd=root, env=runner_env(server, extra=env),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)  # fmt: skip
    try:
        while not server.requests:
            assert process.poll() is None, process.communicate()
            time.sleep(0.05)
        yield process
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
        process.communicate()


def listed(root: Path, env: dict[str, str]) -> dict[str, Any]:
    done = run_cli(root, None, "runs", "--json", env=env, timeout=120)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    (run,) = [r for r in json.loads(done.stdout) if r["run_id"] == RUN_ID]
    return dict(run)


def test_a_killed_run_is_shown_interrupted_and_resumes(project: Path, backend: str, request: pytest.FixtureRequest) -> None:
    url = str(request.getfixturevalue("postgres_url")) if backend == "postgresql" else None
    env = {"RUNNER_STORE_URL": url} if url else {}
    target = url or project / ".runner" / "runs.sqlite3"
    with ScriptedServer({"fallback": {"hang_seconds": 120}}) as server, running(project, server, env) as process:
        assert listed(project, env)["status"] == "running"  # alive: another process's open leaves it alone
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
        assert (store_row(target) or {})["status"] == "running"  # as the kill left it
        shown = listed(project, env)
    assert shown["status"] == "failed" and shown["error"].startswith("interrupted:"), shown
    assert f"pid {process.pid}" in shown["error"] and f"--run-id {RUN_ID}" in shown["error"]
    assert (store_row(target) or {})["error_kind"] == "interrupted" and shown["finished_at"]
    detail = run_cli(project, None, "runs", "show", RUN_ID, env=env, timeout=120)
    assert "status failed" in detail.stdout and "reason: interrupted:" in detail.stdout, detail.stdout
    with ScriptedServer({"fallback": "Hello."}) as server:
        resumed = run_cli(project, server, *ARGS, env=env)
    assert resumed.returncode == 0, resumed.stderr
    after = store_row(target) or {}
    assert after["status"] == "completed" and after["attempts"] == 2 and after["error_kind"] is None


def test_a_run_of_another_machine_stays_running(project: Path) -> None:
    with ScriptedServer({"fallback": {"hang_seconds": 120}}) as server, running(project, server, {}) as process:
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
    with sqlite3.connect(project / ".runner" / "runs.sqlite3") as db:
        db.execute("UPDATE runs SET holder_host = 'another-machine' WHERE run_id = ?", (RUN_ID,))
    assert listed(project, {})["status"] == "running"  # its process cannot be seen from here


def test_a_run_that_found_its_store_locked_is_recorded_when_the_store_comes_back(project: Path) -> None:
    store = project / ".runner" / "runs.sqlite3"
    brief_wait = {"RUNNER_STORE_BUSY_SECONDS": "2"}  # how long it waits for the lock (default 30 s)
    with ScriptedServer({"fallback": {"hang_seconds": 2}}) as server, running(project, server, brief_wait) as process:
        holder = sqlite3.connect(store, isolation_level=None)
        holder.execute("BEGIN EXCLUSIVE")  # the call fails while another process holds the store
        try:
            _, err = process.communicate(timeout=240)
        finally:
            holder.rollback()
            holder.close()
    assert process.returncode == 1 and "Traceback" not in err, err
    assert str(store) in err and "locked by another process" in err and "(waited 2 s:" in err
    shown = listed(project, {})
    assert shown["status"] == "failed", shown  # not 'running' for ever
    assert shown["error"].startswith("interrupted:") and f"pid {process.pid}" in shown["error"], shown
