"""``runner batch --restart`` over a ``--via batch-api`` journal, on both journal backends
(an SQLite file, and PostgreSQL through ``$RUNNER_STORE_URL``).

- The restart keeps the discarded journal's provider batches in the new journal, in the
  transaction that empties it: ``kill -9`` while its cancels are in flight (the loopback server
  holds the cancel request) leaves them there, and the next run of the command (with or
  without ``--restart``) cancels them, so they are not paid for twice.
- A restart with a batch out cancels it and starts over; with nothing out it cancels nothing.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from runner.model.batch_endpoints import BatchBehaviour
from runner.model.server import ScriptedServer
from tests.cli.batch_api_project import command, records, via_api, wait_until, write_rows
from tests.support.project import copy_shipped

pytestmark = pytest.mark.timeout(300)
TRIAGE = {"category": "bug", "urgency": "high", "summary": "It crashes."}
SCRIPT: dict[str, Any] = {
    "fallback": {"content": json.dumps(TRIAGE), "usage": {"prompt_tokens": 100, "completion_tokens": 20}}
}


class Place:
    """Where the journal lives for one backend, and how a test reads its metadata."""

    def __init__(self, root: Path, url: str | None):
        self.root, self.url = root, url
        self.journal = root / "journal.sqlite3"

    def args(self, *extra: str) -> tuple[str, ...]:
        source = write_rows(self.root / "tickets.jsonl", [
            {"id": f"t{i}", "subject": f"Ticket {i}", "body": f"It crashes {i}"} for i in range(1, 4)
        ])  # fmt: skip
        journal = () if self.url else ("--journal", str(self.journal))  # PostgreSQL: the journal goes to the store
        return via_api(source, self.root / "out.jsonl", *journal, *extra)

    def command(self, server: ScriptedServer, *extra: str) -> tuple[list[str], dict[str, str]]:
        argv, env = command(self.root, server, "triage_ticket", *self.args(*extra))
        if self.url:
            env["RUNNER_STORE_URL"] = self.url
        return argv, env

    def run(self, server: ScriptedServer, *extra: str) -> subprocess.CompletedProcess[str]:
        argv, env = self.command(server, *extra)
        return subprocess.run(
            argv, cwd=self.root, env=env, capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL
        )

    def meta(self, key: str) -> Any:
        """A journal metadata value, parsed (``None``: not there, or not readable yet)."""
        import psycopg

        try:
            if self.url:
                with psycopg.connect(self.url, autocommit=True) as db:
                    found = db.execute("SELECT value FROM journal_meta WHERE key = %s", (key,)).fetchone()
            else:
                with sqlite3.connect(self.journal, timeout=5) as lite:
                    found = lite.execute("SELECT value FROM batch WHERE key = ?", (key,)).fetchone()
        except (sqlite3.OperationalError, psycopg.Error):  # a table not made yet reads as nothing
            return None
        return json.loads(found[0]) if found else None

    def gone(self, pid: int) -> None:
        """Until PostgreSQL has ended a killed process's sessions (its journal lock with them)."""
        if not self.url:
            return
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as db:
            while db.execute(
                "SELECT 1 FROM pg_stat_activity WHERE application_name LIKE %s", (f"%pid {pid}%",)
            ).fetchone():
                time.sleep(0.05)


@pytest.fixture(params=["sqlite", "postgresql"])
def place(request: pytest.FixtureRequest, tmp_path: Path) -> Place:
    url = str(request.getfixturevalue("postgres_url")) if request.param == "postgresql" else None
    return Place(copy_shipped(tmp_path / "project"), url)


def _out_and_polled(server: ScriptedServer, place: Place) -> bool:
    return bool((place.meta("provider_state") or {}).get("out")) and any(
        b.polls >= 2 for b in server.batches.batches.values()
    )


def _interrupted_with_a_batch_out(place: Place, server: ScriptedServer) -> str:
    """Run the command until its provider batch is out and polled, then Ctrl-C it; the batch id."""
    argv, env = place.command(server)
    process = subprocess.Popen(
        argv, cwd=place.root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    try:
        assert wait_until(lambda: _out_and_polled(server, place)), "the batch was never out"
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 130, stderr
    place.gone(process.pid)
    (old,) = server.batches.batches
    return old


@pytest.mark.parametrize("again", [("--restart",), ()], ids=["rerun-restart", "rerun-plain"])
def test_a_restart_killed_during_its_cancels_leaves_them_to_the_next_run(place: Place, again: tuple[str, ...]) -> None:
    with ScriptedServer(SCRIPT, batch=BatchBehaviour(polls=10_000)) as server:
        old = _interrupted_with_a_batch_out(place, server)
        server.batches.behaviour = BatchBehaviour(polls=10_000, hold=frozenset({"cancel"}))
        argv, env = place.command(server, "--restart")
        restarting = subprocess.Popen(
            argv, cwd=place.root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            assert wait_until(lambda: server.batches.holding("cancel") > 0), "the restart never cancelled"
        finally:
            restarting.send_signal(signal.SIGKILL)
            restarting.wait(timeout=30)
        server.batches.release(drop=True)  # the cancel never reached the provider
        place.gone(restarting.pid)
        assert server.batches.batches[old].status == "in_progress"
        (kept,) = place.meta("discarded")  # the old journal is gone, its batch is still on record
        assert old in kept["provider_state"]
        server.batches.behaviour = BatchBehaviour(polls=1)
        rerun = place.run(server, *again)
        assert rerun.returncode == 0, rerun.stderr
        assert f"--restart: cancelled provider batch {old}" in rerun.stderr and "Traceback" not in rerun.stderr
        assert server.batches.batches[old].status == "cancelling" and server.batches.batches_created == 2
        assert place.meta("discarded") == []  # dealt with: a later run cancels nothing
        later = place.run(server, "--restart")
        assert later.returncode == 0, later.stderr
        assert f"cancelled provider batch {old}" not in later.stderr
    assert {r["status"] for r in records(place.root / "out.jsonl").values()} == {"done"}


def test_restart_cancels_what_was_out_and_starts_over(place: Place) -> None:
    with ScriptedServer(SCRIPT, batch=BatchBehaviour(polls=10_000)) as server:
        old = _interrupted_with_a_batch_out(place, server)
        server.batches.behaviour = BatchBehaviour(polls=1)
        restarted = place.run(server, "--restart")
        assert restarted.returncode == 0, restarted.stderr
        assert f"--restart: cancelled provider batch {old}" in restarted.stderr
        assert server.batches.batches[old].status == "cancelling" and server.batches.batches_created == 2
        assert place.meta("discarded") == [] and (place.meta("provider_state") or {}).get("out") == []
        first, second = sorted(server.batches.batches.values(), key=lambda b: b.id)
        assert first.metadata["runner_batch_id"] != second.metadata["runner_batch_id"]  # type: ignore[index]  # a new batch
    assert {r["status"] for r in records(place.root / "out.jsonl").values()} == {"done"}


def test_restart_with_nothing_out_cancels_nothing(place: Place) -> None:
    with ScriptedServer(SCRIPT, batch=BatchBehaviour(polls=1)) as server:
        first = place.run(server)
        assert first.returncode == 0, first.stderr
        restarted = place.run(server, "--restart")
        assert restarted.returncode == 0, restarted.stderr
        assert "--restart:" not in restarted.stderr and server.batches.batches_created == 2
        assert not [r for r in server.requests if r.path.endswith("/cancel")]
        assert place.meta("discarded") in (None, [])
