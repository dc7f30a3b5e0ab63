"""``runner batch`` whose PostgreSQL journal lock is lost while it runs: an administrator ends
the journal's session (``pg_terminate_backend``) while a row's model call is in flight, and a
second ``runner batch`` of the same task and input starts in the gap and takes the journal.
When the first comes back to its journal it stops with exit 2 and a message saying what
happened, whether the second still holds the journal or has ended, and writes no output; the
rows stay recorded once, and running the command again finishes what is left."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from runner.model.server import ScriptedServer
from tests.postgres import terminate
from tests.support.project import run_cli, runner_env, write_project

pytestmark = pytest.mark.timeout(300)
ROWS = 6
PROJECT = {
    "agents.d/echo.yaml": (
        "apiVersion: runner/v1\nkind: Agent\nname: echo\nmodel: {id: gpt-4o-mini, retries: 0}\nsystem_prompt: Echo.\n"
    ),
    "tasks.d/ask.yaml": (
        "apiVersion: runner/v1\nkind: Task\nname: ask\ninputs: {q: {type: string}}\nagent: echo\n"
        'goal: "{{ inputs.q }}"\n'
    ),
    "a.csv": "q\n" + "".join(f"alpha-{i}\n" for i in range(1, ROWS + 1)),
}
LONG = 120  # a call that lasts until its server is closed (closing wakes it)


def args(output: str) -> tuple[str, ...]:
    return ("batch", "ask", "--input", "a.csv", "--output", output, "--concurrency", "1", "--progress", "none")


KEEP = "--keep-answers"
"""Another loopback server is another endpoint (in the batch's fingerprint): later batches keep the answers made so far."""


def slow_on(row: str) -> dict[str, Any]:
    return {"rules": [{"when": {"last_message": f"^{row}$"}, "reply": {"content": "late", "latency_seconds": LONG}}],
            "fallback": "ok"}  # fmt: skip


def start(root: Path, server: ScriptedServer, output: str, env: dict[str, str], log: str, *extra: str) -> subprocess.Popen[str]:
    with (root / log).open("w") as stream:
        return subprocess.Popen([sys.executable, "-m", "runner", *args(output), *extra], cwd=root,
                                env=runner_env(server, extra=env), stdout=stream, stderr=stream, text=True)  # fmt: skip


def wait_for(server: ScriptedServer, goal: str, process: subprocess.Popen[str], log: Path) -> None:
    while goal not in goals(server):
        assert process.poll() is None, log.read_text()
        time.sleep(0.05)


def goals(server: ScriptedServer) -> list[str]:
    return [r.body["messages"][-1]["content"] for r in server.requests]


def journal_session(url: str, pid: int) -> int:
    import psycopg

    with psycopg.connect(url, autocommit=True) as db:
        while not (found := db.execute("SELECT pid FROM pg_stat_activity WHERE application_name LIKE %s",
                                       (f"runner batch % pid {pid}",)).fetchone()):  # fmt: skip
            time.sleep(0.05)
    return int(found[0])


def journal_rows(url: str) -> dict[int, tuple[str, int]]:
    """Row number -> (status, attempts)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as db:
        found = db.execute("SELECT row_number, status, attempts FROM journal_rows").fetchall()
    return {int(r[0]): (str(r[1]), int(r[2])) for r in found}


def stopped_for_the_journal(code: int, log: str) -> None:
    assert code == 2, log
    assert "this batch's session in the store was ended" in log and "Traceback" not in log
    assert "no row runs twice" in log and "Run the same command again" in log


def test_a_second_batch_that_ran_in_the_gap_and_ended_stops_the_first(tmp_path: Path, postgres_url: str) -> None:
    root = write_project(tmp_path / "project", PROJECT)
    env = {"RUNNER_STORE_URL": postgres_url}
    with ScriptedServer(slow_on("alpha-3")) as first_server:
        first = start(root, first_server, "out1.jsonl", env, "first.log")
        try:
            wait_for(first_server, "alpha-3", first, root / "first.log")  # two rows done, the third in flight
            terminate(postgres_url, journal_session(postgres_url, first.pid))
            with ScriptedServer({"fallback": "ok"}) as second_server:
                second = run_cli(root, second_server, *args("out2.jsonl"), KEEP, env=env)  # started in the gap, ran to its end
                second_goals = goals(second_server)
            assert second.returncode == 0, second.stderr
            first_server.close()  # the first's call ends (failed), and it goes back to its journal
            code = first.wait(timeout=240)
        finally:
            first.kill()
    log = (root / "first.log").read_text()
    stopped_for_the_journal(code, log)
    assert "took this journal meanwhile and has ended" in log
    assert not (root / "out1.jsonl").exists()  # the first wrote no output
    assert sorted(second_goals) == ["alpha-3", "alpha-4", "alpha-5", "alpha-6"]  # the in-flight row again, then the rest
    written = [json.loads(line) for line in (root / "out2.jsonl").read_text().splitlines()]
    assert len(written) == ROWS
    rows = journal_rows(postgres_url)
    assert {status for status, _ in rows.values()} == {"done"}  # the first's failed call was never recorded over it
    assert sorted(rows) == list(range(1, ROWS + 1))
    assert rows[3][1] == 2 and all(attempts == 1 for row, (_, attempts) in rows.items() if row != 3)


def test_a_second_batch_holding_the_journal_when_the_first_comes_back_stops_the_first(
    tmp_path: Path, postgres_url: str
) -> None:
    root = write_project(tmp_path / "project", PROJECT)
    env = {"RUNNER_STORE_URL": postgres_url}
    with ScriptedServer(slow_on("alpha-3")) as first_server, ScriptedServer(slow_on("alpha-5")) as second_server:
        first = start(root, first_server, "out1.jsonl", env, "first.log")
        second: subprocess.Popen[str] | None = None
        try:
            wait_for(first_server, "alpha-3", first, root / "first.log")
            terminate(postgres_url, journal_session(postgres_url, first.pid))
            second = start(root, second_server, "out2.jsonl", env, "second.log", KEEP)
            wait_for(second_server, "alpha-5", second, root / "second.log")  # the second holds the journal, a row in flight
            first_server.close()
            code = first.wait(timeout=240)
            assert second.poll() is None  # the first's stop left the second alone
            second.terminate()  # SIGTERM: it stops as an interrupted batch would
            second.wait(timeout=120)
        finally:
            first.kill()
            if second is not None:
                second.kill()
    log = (root / "first.log").read_text()
    stopped_for_the_journal(code, log)
    assert "another batch process took this journal (session" in log and "holds it now" in log
    assert not (root / "out1.jsonl").exists()
    with ScriptedServer({"fallback": "ok"}) as fast:
        again = run_cli(root, fast, *args("out3.jsonl"), KEEP, env=env)
        resumed = goals(fast)
    assert again.returncode == 0, again.stderr
    assert "alpha-1" not in resumed and "alpha-2" not in resumed and "alpha-4" not in resumed  # recorded once, not paid again
    assert {status for status, _ in journal_rows(postgres_url).values()} == {"done"}
    assert len((root / "out3.jsonl").read_text().splitlines()) == ROWS
