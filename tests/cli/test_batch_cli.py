"""`runner batch` as a real process: the example task file, kill -9 and resume, batch caps, bad rows."""

from __future__ import annotations

import csv
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runner.model.server import ScriptedServer
from tests.support.project import copy_shipped

REPO = Path(__file__).resolve().parents[2]
TRIAGE = '{"category": "bug", "urgency": "high", "summary": "It crashes."}'


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return copy_shipped(tmp_path / "project", ("agents.d", "tasks.d", "examples/data/sales.csv"))


def tickets(root: Path, rows: int) -> Path:
    path = root / "tickets.csv"
    with open(REPO / "examples/batch/tickets.csv", newline="") as src, open(path, "w", newline="") as dst:
        reader = csv.reader(src)
        writer = csv.writer(dst)
        for i, row in enumerate(reader):
            if i > rows:
                break
            writer.writerow(row)
    return path


def command(root: Path, server: ScriptedServer, *args: str) -> tuple[list[str], dict[str, str]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI")}
    env.update(OPENAI_BASE_URL=server.base_url, OPENAI_API_KEY="sk-test-batch")
    return [sys.executable, "-m", "runner", "batch", "triage_ticket", *args], env


def records(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_kill_9_then_resume_gives_exactly_one_record_per_row(project: Path) -> None:
    source = tickets(project, 120)
    out = project / "out.jsonl"
    journal = project / "journal.sqlite3"
    with ScriptedServer({"fallback": {"content": TRIAGE, "latency_seconds": 0.05}}) as server:
        argv, env = command(project, server, "--input", str(source), "--output", str(out), "--id-column", "id",
                            "--journal", str(journal), "--concurrency", "4", "--progress", "none")
        process = subprocess.Popen(argv, cwd=project, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 120
        done = 0
        while time.monotonic() < deadline and done < 30:
            time.sleep(0.1)
            if journal.exists():
                try:
                    with sqlite3.connect(journal, timeout=5) as db:
                        done = db.execute("SELECT COUNT(*) FROM rows WHERE status = 'done'").fetchone()[0]
                except sqlite3.OperationalError:
                    continue
        assert done >= 30, "the batch did not make progress"
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
        assert not out.exists()
        calls_before = len(server.requests)
        resumed = subprocess.run(argv, cwd=project, env=env, capture_output=True, text=True, timeout=300)
        assert resumed.returncode == 0, resumed.stderr
    rows = records(out)
    assert len(rows) == 120 and len({r["id"] for r in rows}) == 120
    assert all(r["status"] == "done" for r in rows)
    assert len(server.requests) - calls_before <= 120 - done + 4  # only unfinished rows (and those in flight) ran again


def test_batch_cost_cap_stops_new_rows_and_reports_them(project: Path) -> None:
    source = tickets(project, 60)
    out = project / "out.csv"
    with ScriptedServer({"fallback": {"content": TRIAGE}}) as server:
        argv, env = command(project, server, "--input", str(source), "--output", str(out), "--id-column", "id",
                            "--concurrency", "2", "--max-cost-usd", "0.0004", "--progress", "none", "--json")
        result = subprocess.run(argv, cwd=project, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 3, result.stderr
    summary = json.loads(result.stdout)
    assert summary["cost_usd"] <= 0.0004
    assert summary["counts"]["not_run"] > 0 and summary["counts"]["done"] > 0
    with open(out, newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 60
    report = Path(summary["report_path"]).read_text()
    assert "not run" in report.lower()


def test_bad_rows_get_per_row_errors_and_the_batch_goes_on(project: Path) -> None:
    source = project / "rows.jsonl"
    source.write_text(
        json.dumps({"id": "a", "subject": "Crash", "body": "It crashes on start"}) + "\n"
        + '{"id": "b", "subject": NaN, "body": "x"}\n'
        + json.dumps({"id": "c", "body": "no subject"}) + "\n"
        + b'{"id": "d", "subject": "caf\xe9", "body": "x"}\n'.decode("latin-1")
        + json.dumps({"id": "e", "subject": "Refund", "body": "Please refund"}) + "\n",
        encoding="utf-8",
    )
    raw = source.read_bytes().replace("café".encode(), b"caf\xe9")
    source.write_bytes(raw)
    out = project / "out.jsonl"
    with ScriptedServer({"fallback": {"content": TRIAGE}}) as server:
        argv, env = command(project, server, "--input", str(source), "--output", str(out), "--id-column", "id", "--progress", "none")
        result = subprocess.run(argv, cwd=project, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 1, result.stderr
    by_status = {}
    for row in records(out):
        by_status.setdefault(row["status"], []).append(row)
    assert len(by_status["done"]) == 2
    errors = " | ".join(str(r["error"]) for r in by_status["invalid"])
    assert "NaN" in errors and "subject" in errors and "UTF-8" in errors
