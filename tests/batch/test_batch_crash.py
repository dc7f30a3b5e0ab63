"""A real crash: kill -9 a batch process mid-run, resume in a new process, check exactly-once recording."""

from __future__ import annotations

import collections
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.batch.batch_fakes import write_csv

pytestmark = pytest.mark.timeout(120)

SCRIPT = Path(__file__).with_name("crash_batch_script.py")
ROWS = 400


def done_run_ids(journal: Path, url: str | None = None) -> set[str]:
    """Run ids of rows the journal holds as done (read-only, from another process)."""
    if url:
        import psycopg

        with psycopg.connect(url, autocommit=True) as db:
            try:
                found = db.execute(
                    "SELECT run_id FROM journal_rows WHERE journal = %s AND status = 'done'", (str(journal),)
                ).fetchall()
            except psycopg.errors.UndefinedTable:  # not created yet
                return set()
        return {run_id for (run_id,) in found}
    try:
        db = sqlite3.connect(f"file:{journal}?mode=ro", uri=True)
    except sqlite3.OperationalError:
        return set()
    try:
        return {run_id for (run_id,) in db.execute("SELECT run_id FROM rows WHERE status = 'done'")}
    except sqlite3.OperationalError:  # not created yet
        return set()
    finally:
        db.close()


def start(tmp_path: Path, url: str | None) -> subprocess.Popen[bytes]:
    args = [sys.executable, str(SCRIPT), *(str(tmp_path / n) for n in ("in.csv", "j.sqlite3", "exec.log", "out.jsonl"))]
    return subprocess.Popen([*args, *([url] if url else [])], cwd=tmp_path, stderr=subprocess.PIPE)



def test_kill_9_mid_run_then_resume_records_every_row_exactly_once(tmp_path: Path, journal_url: str | None) -> None:
    write_csv(tmp_path / "in.csv", [{"id": f"R{i:04d}", "subject": f"row {i}"} for i in range(1, ROWS + 1)])
    journal = tmp_path / "j.sqlite3"

    first = start(tmp_path, journal_url)
    while len(done_run_ids(journal, journal_url)) < 40:
        assert first.poll() is None, f"the batch ended before it could be killed: {first.stderr.read()!r}"  # type: ignore[union-attr]
        time.sleep(0.02)
    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    first.stderr.close()  # type: ignore[union-attr]
    assert first.returncode == -signal.SIGKILL
    done_at_kill = done_run_ids(journal, journal_url)
    assert 40 <= len(done_at_kill) < ROWS
    assert not (tmp_path / "out.jsonl").exists()

    second = start(tmp_path, journal_url)
    _, stderr = second.communicate(timeout=100)
    assert second.returncode == 0, stderr.decode()

    records = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [r["id"] for r in records] == [f"R{i:04d}" for i in range(1, ROWS + 1)]  # one per row, input order
    assert all(r["status"] == "done" for r in records)
    assert all(r["output"] == {"upper": f"ROW {r['row']}"} for r in records)

    executions = collections.Counter((tmp_path / "exec.log").read_text(encoding="utf-8").split())
    run_ids = {r["run_id"] for r in records}
    assert set(executions) == run_ids  # every row ran
    assert all(executions[run_id] == 1 for run_id in done_at_kill)  # done rows never ran again
    assert max(executions.values()) <= 2  # an interrupted row ran once more, no row more than that
    rerun = {run_id for run_id, n in executions.items() if n == 2}
    attempts = {r["run_id"]: r["attempts"] for r in records}
    assert all(attempts[run_id] == 2 for run_id in rerun)  # the interrupted attempt counted
