"""``runner batch`` whose URL output's lock in the PostgreSQL store is lost while it runs: an
administrator ends its lock session (``pg_terminate_backend``) and another holder takes the
output at once. The batch notices at its next heartbeat (not at its end), stops with exit 2
and a message saying what happened, and does not write the output; the rows it completed stay
in its journal, so running the same command again resumes them instead of paying again."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runner.batch.output_lock_store import lock_key
from runner.model.server import ScriptedServer
from tests.postgres import terminate
from tests.support.project import run_cli, runner_env, write_project

pytestmark = pytest.mark.timeout(300)
ROWS = 40
OUTPUT = "memory://outputs/out.jsonl"  # each process has its own memory://: only the store's lock is shared
PROJECT = {
    "agents.d/echo.yaml": "apiVersion: runner/v1\nkind: Agent\nname: echo\nmodel: {id: gpt-4o-mini}\nsystem_prompt: Echo.\n",
    "tasks.d/ask.yaml": (
        "apiVersion: runner/v1\nkind: Task\nname: ask\ninputs: {q: {type: string}}\nagent: echo\n"
        'goal: "{{ inputs.q }}"\n'
    ),
    "a.csv": "q\n" + "".join(f"alpha-{i}\n" for i in range(1, ROWS + 1)),
}
ARGS = ("batch", "ask", "--input", "a.csv", "--output", OUTPUT, "--concurrency", "1", "--progress", "none")


def lock_session(url: str, pid: int) -> int:
    import psycopg

    with psycopg.connect(url, autocommit=True) as db:
        while not (found := db.execute("SELECT pid FROM pg_stat_activity WHERE application_name LIKE %s",
                                       (f"runner output lock % pid {pid}",)).fetchone()):  # fmt: skip
            time.sleep(0.05)
    return int(found[0])


def goals(server: ScriptedServer) -> list[str]:
    return [r.body["messages"][-1]["content"] for r in server.requests]


def test_a_batch_whose_lock_session_is_ended_and_taken_stops_at_once_and_resumes_later(tmp_path: Path, postgres_url: str) -> None:
    import psycopg

    root = write_project(tmp_path / "project", PROJECT)
    env = {"RUNNER_STORE_URL": postgres_url}
    with ScriptedServer({"fallback": {"content": "ok", "latency_seconds": 1.0}}) as server:
        with (root / "first.log").open("w") as log:
            first = subprocess.Popen([sys.executable, "-m", "runner", *ARGS], cwd=root, env=runner_env(server, extra=env),
                                     stdout=log, stderr=log, text=True)  # fmt: skip
        try:
            while len(server.requests) < 3:  # two rows done, the third in flight
                assert first.poll() is None, (root / "first.log").read_text()
                time.sleep(0.05)
            with psycopg.connect(postgres_url, autocommit=True) as other:  # another batch, as the store sees one
                terminate(postgres_url, lock_session(postgres_url, first.pid))
                while not other.execute("SELECT pg_try_advisory_lock(%s)", (lock_key(OUTPUT),)).fetchone()[0]:
                    time.sleep(0.01)
                other.execute("UPDATE output_locks SET holder = %s WHERE target = %s",
                              (json.dumps({"pid": 99, "host": "worker-2", "task": "ask"}), OUTPUT))  # fmt: skip
                code = first.wait(timeout=240)
        finally:
            first.kill()
        stopped_after = goals(server)
        log = (root / "first.log").read_text()
        assert code == 2, log
        assert "lost its lock on the output" in log and "pid 99, host worker-2, task ask" in log and "holds it now" in log
        assert "did not write the output" in log and "run the same command again" in log and "Traceback" not in log
        assert len(stopped_after) < ROWS / 2  # stopped at a heartbeat, not after every row
    with ScriptedServer({"fallback": "ok"}) as fast:
        # the other holder has ended (its session closed); another loopback server is another endpoint, so the
        # answers made so far are kept explicitly (the batch's fingerprint names the endpoint)
        again = run_cli(root, fast, *ARGS, "--keep-answers", env=env)
        resumed = goals(fast)
    assert again.returncode == 0, again.stderr
    assert sorted(set(stopped_after) | set(resumed)) == sorted(f"alpha-{i}" for i in range(1, ROWS + 1))
    assert set(stopped_after) & set(resumed) <= {stopped_after[-1]}  # only the row in flight at the stop runs again
