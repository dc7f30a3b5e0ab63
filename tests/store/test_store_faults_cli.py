"""``runner batch`` on a PostgreSQL store that fails under it, through the real CLI and the
loopback model server: the batch's sessions ended by ``pg_terminate_backend`` mid-batch, the
server restarted mid-batch, a fan-out shard's cap ledger cut off too, and a server that stays
down (a clear error, then the same command resumes). Every row ends done once, no model call
is made (paid) twice, no row is lost."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

from runner.model.server import ScriptedServer
from tests.support.project import copy_shipped, runner_env

pytestmark = pytest.mark.timeout(300)
ROWS = 16
TRIAGE = '{"category": "bug", "urgency": "high", "summary": "It crashes."}'
SLOW = {"fallback": {"content": TRIAGE, "latency_seconds": 0.25}}  # a batch that takes a few seconds
BATCH = ("batch", "triage_ticket", "--input", "tickets.jsonl", "--output", "out.jsonl", "--id-column", "id",
         "--progress", "none", "--concurrency", "2")  # fmt: skip


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = copy_shipped(tmp_path / "project")
    (root / "tickets.jsonl").write_text("".join(
        json.dumps({"id": f"T{i:02d}", "subject": "crash", "body": f"It crashes ({i})."}) + "\n" for i in range(ROWS)
    ))  # fmt: skip
    return root


def done_rows(url: str) -> int:
    try:
        with psycopg.connect(url, autocommit=True, connect_timeout=5) as db:
            row = db.execute("SELECT COUNT(*) FROM journal_rows WHERE status = 'done'").fetchone()
    except (psycopg.errors.UndefinedTable, psycopg.OperationalError):  # not created yet / the server is restarting
        return 0
    return int(row[0]) if row else 0


def terminate_batch_sessions(url: str) -> int:
    """End every session of the batch's database but this one; how many were ended."""
    with psycopg.connect(url, autocommit=True) as db:
        ended = db.execute(
            "SELECT COUNT(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
        ).fetchone()
    return int(ended[0]) if ended else 0


def batch_with_fault(project: Path, url: str, server: ScriptedServer, fault: Callable[[], Any],
                     env: dict[str, str] | None = None, argv: list[str] | None = None) -> tuple[subprocess.CompletedProcess[str], int]:  # fmt: skip
    """Start the batch, apply ``fault`` once some rows are done and before the last, wait for the
    end; returns the finished process and how many rows were done when the fault struck."""
    command = argv or [sys.executable, "-m", "runner", *BATCH]
    extra = {"RUNNER_STORE_URL": url, **(env or {})}
    process = subprocess.Popen(command, cwd=project, env=runner_env(server, extra=extra), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)  # fmt: skip
    while (done := done_rows(url)) < 3:
        assert process.poll() is None, process.communicate()
        time.sleep(0.05)
    fault()
    stdout, stderr = process.communicate(timeout=240)
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr), done


def assert_each_row_done_once(project: Path, url: str, server: ScriptedServer) -> None:
    output = [json.loads(line) for line in (project / "out.jsonl").read_text().splitlines()]
    assert sorted(r["id"] for r in output) == [f"T{i:02d}" for i in range(ROWS)]  # no row lost
    assert {(r["status"], r["attempts"]) for r in output} == {("done", 1)}  # none ran twice
    assert len(server.requests) == ROWS  # no model call made (paid) twice
    with psycopg.connect(url) as db:
        calls = db.execute("SELECT run_id, COUNT(*), MIN(status), MAX(status) FROM model_calls GROUP BY run_id").fetchall()
        runs = db.execute("SELECT COUNT(*), MAX(attempts), MIN(status) FROM runs").fetchone()
        cost = db.execute("SELECT SUM(cost_usd) FROM journal_rows").fetchone()
        recorded = db.execute("SELECT SUM(cost_usd) FROM model_calls").fetchone()
    assert len(calls) == ROWS and {c[1:] for c in calls} == {(1, "ok", "ok")}  # each call recorded once, settled
    assert runs == (ROWS, 1, "completed")
    assert cost is not None and recorded is not None and cost[0] == pytest.approx(recorded[0])


def test_sessions_ended_mid_batch_reconnect_and_the_batch_finishes(project: Path, postgres_url: str) -> None:
    ended: list[int] = []
    with ScriptedServer(SLOW) as server:
        result, done = batch_with_fault(project, postgres_url, server, lambda: ended.append(terminate_batch_sessions(postgres_url)))
        assert result.returncode == 0, result.stderr
        assert ended[0] >= 2 and done < ROWS  # the journal's and the run store's sessions, mid-batch
        assert "reconnected to the store" in result.stderr
        assert_each_row_done_once(project, postgres_url, server)


def test_a_server_restart_mid_batch_reconnects_and_the_batch_finishes(project: Path, postgres_url: str, postgres_cluster: Any) -> None:
    with ScriptedServer(SLOW) as server:
        result, done = batch_with_fault(project, postgres_url, server, postgres_cluster.restart)
        assert result.returncode == 0, result.stderr
        assert done < ROWS and "reconnected to the store" in result.stderr
        assert_each_row_done_once(project, postgres_url, server)


def test_a_server_that_stays_down_stops_the_batch_with_the_fix_then_it_resumes(
    project: Path, postgres_url: str, postgres_cluster: Any
) -> None:
    url = postgres_url.replace("runner@", "runner:pg-s3cret@")  # trust auth ignores it: it must not be shown
    with ScriptedServer(SLOW) as server:
        result, _ = batch_with_fault(project, url, server, postgres_cluster.halt, env={"RUNNER_STORE_RECONNECT_SECONDS": "2"})
        assert result.returncode == 1, result.stderr
        assert "pg-s3cret" not in result.stderr + result.stdout and "Traceback" not in result.stderr
        assert "lost the connection to the store postgresql://runner:***@" in result.stderr
        assert "run the same command again" in result.stderr
        postgres_cluster.resume()
        again = subprocess.run([sys.executable, "-m", "runner", *BATCH], cwd=project, capture_output=True, text=True,
                               env=runner_env(server, extra={"RUNNER_STORE_URL": url}), timeout=240)  # fmt: skip
        assert again.returncode == 0, again.stderr
        requests = len(server.requests)
    output = [json.loads(line) for line in (project / "out.jsonl").read_text().splitlines()]
    assert sorted(r["id"] for r in output) == [f"T{i:02d}" for i in range(ROWS)] and {r["status"] for r in output} == {"done"}
    assert requests <= ROWS + 2  # at most the calls in flight when the store went away were made again
    with psycopg.connect(postgres_url) as db:
        runs = db.execute("SELECT COUNT(*), MIN(status) FROM runs").fetchone()
    assert runs == (ROWS, "completed")


def test_a_shards_cap_ledger_cut_off_mid_batch_counts_each_call_once(project: Path, postgres_url: str) -> None:
    shard = Path(__file__).with_name("shard_script.py")
    data, journal = project / "tickets.jsonl", project / "shard-1.sqlite3"
    argv = [sys.executable, str(shard), str(project), str(data), str(journal), "unused", "fanout:cut", "1.0", postgres_url]
    with ScriptedServer(SLOW) as server:
        result, done = batch_with_fault(project, postgres_url, server, lambda: terminate_batch_sessions(postgres_url), argv=argv)
        requests = len(server.requests)
    assert result.returncode == 0, result.stderr
    assert done < ROWS and json.loads(result.stdout)["counts"]["done"] == ROWS and requests == ROWS
    with psycopg.connect(postgres_url) as db:
        scope = db.execute("SELECT spent_model_calls, spent_cost_usd, reserved_model_calls, reserved_cost_usd FROM cap_scopes"
                           " WHERE key = 'fanout:cut'").fetchone()  # fmt: skip
        entries = db.execute("SELECT status, COUNT(*) FROM cap_entries WHERE scope = 'fanout:cut' GROUP BY status").fetchall()
        journal_cost = db.execute("SELECT SUM(cost_usd) FROM journal_rows").fetchone()
    assert scope is not None and journal_cost is not None
    assert scope[0] == ROWS and scope[2] == 0 and scope[3] == pytest.approx(0, abs=1e-12)  # each call held and settled once
    assert scope[1] == pytest.approx(journal_cost[0])
    assert dict(entries) == {"settled": ROWS}
