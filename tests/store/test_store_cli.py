"""Selecting the store from the CLI: ``RUNNER_STORE_URL`` moves runs and journals to
PostgreSQL; a wrong or unreachable URL is a clear error with its exit code, never a traceback
and never the password."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from runner.model.server import ScriptedServer
from tests.support.project import copy_shipped, run_cli

pytestmark = pytest.mark.timeout(180)
REPO = Path(__file__).resolve().parents[2]
TRIAGE = '{"category": "bug", "urgency": "high", "summary": "It crashes."}'


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = copy_shipped(tmp_path / "project")
    (root / "tickets.jsonl").write_text("".join(
        json.dumps({"id": f"T{i}", "product": "app", "subject": "crash", "body": f"It crashes ({i})."}) + "\n" for i in range(3)
    ))  # fmt: skip
    return root


def runner(project: Path, store_url: str, *args: str, server: ScriptedServer | None = None) -> subprocess.CompletedProcess[str]:
    return run_cli(project, server, *args, key="sk-test-store-cli-0001", drop=("RUNNER_",),
                   env={"RUNNER_STORE_URL": store_url}, timeout=150)  # fmt: skip


def test_runs_and_journals_live_in_postgresql(project: Path, postgres_url: str) -> None:
    batch = ("batch", "triage_ticket", "--input", "tickets.jsonl", "--output", "out.jsonl", "--id-column", "id",
             "--progress", "none")  # fmt: skip
    with ScriptedServer({"fallback": TRIAGE}) as server:
        first = runner(project, postgres_url, *batch, server=server)
        again = runner(project, postgres_url, *batch, server=server)
        calls = len(server.requests)
    assert first.returncode == 0 and again.returncode == 0, first.stderr + again.stderr
    assert calls == 3  # the second command resumed the journal in PostgreSQL: every row was done
    assert not list(project.rglob("*.sqlite3"))  # no run store, no journal on this disk
    listed = runner(project, postgres_url, "runs", "--json")
    assert listed.returncode == 0, listed.stderr
    assert len(json.loads(listed.stdout)) == 3


@pytest.mark.parametrize(
    ("url", "code", "message"),
    [
        ("postgresql://runner:hunter2-secret@127.0.0.1:1/runner?connect_timeout=2", 1, "cannot connect to the store"),
        ("mysql://runner:hunter2-secret@127.0.0.1/runner", 2, "is not a PostgreSQL URL"),
    ],
)
def test_a_store_that_cannot_be_used_is_a_clear_error(project: Path, url: str, code: int, message: str) -> None:
    with ScriptedServer({"fallback": TRIAGE}) as server:
        done = runner(project, url, "run", "triage_ticket", "-i", "subject=x", "-i", "body=y", server=server)
        calls = len(server.requests)
    assert done.returncode == code, done.stderr
    assert message in done.stderr and "hunter2-secret" not in done.stderr + done.stdout
    assert "Traceback" not in done.stderr and calls == 0
