"""One batch at a time per output at a URL: two real ``runner batch`` processes race for one
``--output`` URL and the second is refused (exit 2, naming the first); the lock is a lock
object next to the output (fsspec, create-exclusive, taken over when its holder is gone) or,
with a PostgreSQL store, a lock in the store that goes with the holder's session."""

from __future__ import annotations

import datetime as dt
import json
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from runner.batch.output import exclusive_output
from runner.batch.output_lock import stale
from runner.errors import UsageError
from runner.locations import location
from runner.model.server import ScriptedServer
from tests.support.project import run_cli, runner_env, write_project

pytestmark = pytest.mark.timeout(300)
PROJECT = {
    "agents.d/echo.yaml": "apiVersion: runner/v1\nkind: Agent\nname: echo\nmodel: {id: gpt-4o-mini}\nsystem_prompt: Echo.\n",
    "tasks.d/ask.yaml": (
        "apiVersion: runner/v1\nkind: Task\nname: ask\ninputs: {q: {type: string}}\nagent: echo\n"
        'goal: "{{ inputs.q }}"\n'
    ),
    "a.csv": "q\nalpha-1\nalpha-2\nalpha-3\n",
    "b.csv": "q\nbravo-1\nbravo-2\n",
}


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return write_project(tmp_path / "project", PROJECT)


@pytest.fixture
def slow_server() -> Iterator[ScriptedServer]:
    with ScriptedServer({"fallback": {"content": "ok", "latency_seconds": 1.0}}) as srv:
        yield srv


def batch(source: str, output: str) -> list[str]:
    return ["batch", "ask", "--input", source, "--output", output, "--concurrency", "1", "--progress", "none"]


def start(root: Path, server: ScriptedServer, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """Start a batch and return once its first model call arrived (so it holds the output)."""
    with (root / "first.log").open("w") as log:
        process = subprocess.Popen([sys.executable, "-m", "runner", *args], cwd=root, env=runner_env(server, extra=env),
                                   stdout=log, stderr=log, text=True)  # fmt: skip
    while not server.requests:
        assert process.poll() is None, (root / "first.log").read_text()
        time.sleep(0.05)
    return process


def goals(server: ScriptedServer) -> str:
    return json.dumps([r.body for r in server.requests])


# --- a lock object next to the output ------------------------------------------------------------


def test_a_second_batch_on_the_same_url_output_is_refused_naming_the_first(
    root: Path, tmp_path: Path, slow_server: ScriptedServer
) -> None:
    output = f"local://{tmp_path}/shared/out.jsonl"
    first = start(root, slow_server, *batch("a.csv", output))
    try:
        second = run_cli(root, slow_server, *batch("b.csv", output))
        assert second.returncode == 2, second.stderr
        message = second.stderr
        assert "another batch" in message and "writing this output file" in message and "Traceback" not in message
        assert f"pid {first.pid}" in message and f"host {socket.gethostname()}" in message
        assert str(root / "a.csv") in message and ".runner/batches/ask-" in message  # its input and journal
        assert ".out.jsonl.lock" in message and "--output" in message
        assert first.wait(timeout=300) == 0, (root / "first.log").read_text()
    finally:
        first.kill()
    rows = [json.loads(line)["row"] for line in (tmp_path / "shared" / "out.jsonl").read_text().splitlines()]
    assert rows == [1, 2, 3] and "bravo" not in goals(slow_server)  # the refused batch ran nothing
    assert not (tmp_path / "shared" / ".out.jsonl.lock").exists()  # released at the end
    again = run_cli(root, slow_server, *batch("b.csv", output))
    assert again.returncode == 0, again.stderr


def test_the_lock_object_of_a_killed_batch_is_stale_and_taken_over(root: Path, tmp_path: Path, slow_server: ScriptedServer) -> None:
    output = f"local://{tmp_path}/shared/out.jsonl"
    first = start(root, slow_server, *batch("a.csv", output))
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=60)
    assert (tmp_path / "shared" / ".out.jsonl.lock").exists()  # left behind: nothing can remove it on SIGKILL
    second = run_cli(root, slow_server, *batch("b.csv", output))
    assert second.returncode == 0, second.stderr
    assert "taking over the stale output lock" in second.stderr


def planted(tmp_path: Path, expires: dt.datetime, **fields: object) -> Path:
    lock = tmp_path / "shared" / ".out.jsonl.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    holder = {"pid": 4242, "host": "another-worker", "task": "ask", "input": "/data/x.csv", "token": "t",
              "expires_at": expires.isoformat(), **fields}  # fmt: skip
    lock.write_text(json.dumps(holder))
    return lock


def test_a_lock_object_from_another_host_holds_until_its_lease_runs_out(root: Path, tmp_path: Path) -> None:
    output = f"local://{tmp_path}/shared/out.jsonl"
    later = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    planted(tmp_path, later)
    with ScriptedServer({"fallback": "ok"}) as server:
        refused = run_cli(root, server, *batch("b.csv", output))
        assert refused.returncode == 2 and server.requests == [], refused.stderr
        assert "pid 4242, host another-worker, task ask, input /data/x.csv" in refused.stderr
        assert f"held until {later.isoformat()}" in refused.stderr and "delete the lock" in refused.stderr
        planted(tmp_path, dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1))  # its holder stopped renewing it
        taken = run_cli(root, server, *batch("b.csv", output))
        assert taken.returncode == 0, taken.stderr


@pytest.mark.parametrize(
    ("found", "is_stale"),
    [
        ({"host": "elsewhere", "pid": 1, "expires_at": "2999-01-01T00:00:00+00:00"}, False),
        ({"host": "elsewhere", "pid": 1, "expires_at": "2000-01-01T00:00:00+00:00"}, True),
        ({"host": "elsewhere", "expires_at": "not a time"}, True),  # nobody can renew it
        ({}, False),  # unreadable (half written?): refused, naming the lock to delete
    ],
)
def test_the_stale_holder_rule(found: dict[str, object], is_stale: bool) -> None:
    assert stale(found) is is_stale


def test_a_live_holder_on_this_host_is_not_stale_however_old_its_lease() -> None:
    import os

    from runner.processes import process_start

    mine = {"host": socket.gethostname(), "pid": os.getpid(), "process_started": process_start(os.getpid()),
            "expires_at": "2999-01-01T00:00:00+00:00"}  # fmt: skip
    assert not stale(mine)
    assert stale({**mine, "process_started": "another boot:1"})  # the pid names another process now


def test_an_in_process_url_lock_refuses_a_second_holder_and_is_released() -> None:
    target = location("memory://locks-test/out.jsonl")
    with exclusive_output(target, {"task": "first"}):
        with pytest.raises(UsageError, match=r"another batch \(pid \d+, host .*, task first\)"), exclusive_output(
            target, {"task": "second"}
        ):
            pass
        assert target.fs.exists("/locks-test/.out.jsonl.lock")
    assert not target.fs.exists("/locks-test/.out.jsonl.lock")
    with exclusive_output(target, {"task": "third"}):
        pass


# --- a lock in the PostgreSQL store ---------------------------------------------------------------


def test_with_a_postgres_store_the_url_lock_is_in_the_store(root: Path, postgres_url: str, slow_server: ScriptedServer) -> None:
    output = "memory://outputs/out.jsonl"  # each process has its own memory://: only the store can see both
    env = {"RUNNER_STORE_URL": postgres_url}
    first = start(root, slow_server, *batch("a.csv", output), env=env)
    try:
        second = run_cli(root, slow_server, *batch("b.csv", output), env=env)
        assert second.returncode == 2, second.stderr
        assert f"another batch (pid {first.pid}, host {socket.gethostname()}, task ask" in second.stderr
        assert "its lock is in the store postgresql://" in second.stderr and "Traceback" not in second.stderr
        first.send_signal(signal.SIGKILL)  # its session ends, and the lock with it
        first.wait(timeout=60)
    finally:
        first.kill()
    wait_until_session_ends(postgres_url, f"pid {first.pid}")
    taken = run_cli(root, slow_server, *batch("b.csv", output), env=env)
    assert taken.returncode == 0, taken.stderr


def wait_until_session_ends(url: str, marker: str) -> None:
    """Until PostgreSQL has ended the killed process's lock session (it notices the socket close)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as db:
        while db.execute("SELECT 1 FROM pg_stat_activity WHERE application_name LIKE %s", (f"%output lock%{marker}",)).fetchone():
            time.sleep(0.05)


def test_with_a_postgres_store_different_url_outputs_run_alongside(root: Path, postgres_url: str, slow_server: ScriptedServer) -> None:
    env = {"RUNNER_STORE_URL": postgres_url}
    first = start(root, slow_server, *batch("a.csv", "memory://outputs/a.jsonl"), env=env)
    try:
        second = run_cli(root, slow_server, *batch("b.csv", "memory://outputs/b.jsonl"), env=env)
        assert second.returncode == 0, second.stderr
        assert first.wait(timeout=300) == 0
    finally:
        first.kill()
