"""A provider batch create still in flight when its process is killed can land at the provider
after the next run looked for it. The next run closes that window: when its search by metadata
finds nothing, it deletes the input file the create would read, and searches again; a create
that lands afterwards fails (its file is gone), so no batch escapes the re-attach (a resume) or
the cancel (``--restart``), and nothing is paid for twice.

The loopback server holds the killed process's create (``hold: create``) and lets it go on only
once the next run has looked, so it lands after the search.
"""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from runner.model.batch_endpoints import BatchBehaviour
from runner.model.server import ScriptedServer
from tests.cli.batch_api_project import command, provider_state, records, via_api, wait_until, write_rows
from tests.support.project import copy_shipped

pytestmark = pytest.mark.timeout(300)
TRIAGE = {"category": "bug", "urgency": "high", "summary": "It crashes."}
SCRIPT: dict[str, Any] = {
    "fallback": {"content": json.dumps(TRIAGE), "usage": {"prompt_tokens": 100, "completion_tokens": 20}}
}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return copy_shipped(tmp_path / "project")


def _args(root: Path, *extra: str) -> tuple[str, ...]:
    rows = [{"id": f"t{i}", "subject": f"Ticket {i}", "body": f"It crashes {i}"} for i in range(1, 4)]
    return via_api(
        write_rows(root / "tickets.jsonl", rows), root / "out.jsonl", "--journal", str(root / "journal.sqlite3"), *extra
    )


def _killed_while_creating(root: Path, server: ScriptedServer) -> str:
    """Run the command until its create is held at the server, ``kill -9`` it; the held create's input file id."""
    argv, env = command(root, server, "triage_ticket", *_args(root))
    process = subprocess.Popen(argv, cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_until(lambda: server.batches.holding("create") > 0), "the create was never sent"
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
    (intent,) = provider_state(root / "journal.sqlite3")["intents"]  # type: ignore[index]
    assert intent["file_id"] and server.batches.batches_created == 0
    return str(intent["file_id"])


def _next_run_lands_the_old_create_late(
    root: Path, server: ScriptedServer, file_id: str, *extra: str
) -> subprocess.CompletedProcess[str]:
    """Start the next run with the old create still held; once that run has settled the old intent
    (the create's input file is gone), let the old create go on; the next run's result."""
    server.batches.behaviour = BatchBehaviour(polls=1)  # the next run's own requests are not held
    argv, env = command(root, server, "triage_ticket", *_args(root, *extra))
    process = subprocess.Popen(argv, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_until(lambda: file_id in server.batches.deleted), "the next run never settled the intent"
        server.batches.release()  # the old create lands now, after the next run's first search
        stdout, stderr = process.communicate(timeout=240)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return subprocess.CompletedProcess(argv, process.returncode, stdout, stderr)


def _landed_late_and_failed(server: ScriptedServer, file_id: str) -> None:
    """The held create was answered (the server records a request once it has answered it), and made no batch."""

    def answered() -> bool:
        return any(r.method == "POST" and r.path.endswith("/batches") and (r.body or {}).get("input_file_id") == file_id
                   for r in server.requests)  # fmt: skip

    assert wait_until(answered), "the held create never went on"
    assert not any(b.input_file_id == file_id for b in server.batches.batches.values())
    assert server.batches.batches_created == 1 and server.batches.deleted_in_use == []  # only the next run's own batch


def test_a_create_that_lands_after_the_resume_looked_makes_no_batch(project: Path) -> None:
    with ScriptedServer(SCRIPT, batch=BatchBehaviour(polls=1, hold=frozenset({"create"}))) as server:
        file_id = _killed_while_creating(project, server)
        resumed = _next_run_lands_the_old_create_late(project, server, file_id)
        assert resumed.returncode == 0, resumed.stderr
        _landed_late_and_failed(server, file_id)
        assert len(server.billed) == 3  # each row answered once
        state = provider_state(project / "journal.sqlite3")
        assert state is not None and state["intents"] == [] and state["out"] == []
    assert {r["status"] for r in records(project / "out.jsonl").values()} == {"done"}


def test_a_create_that_lands_after_a_restart_looked_makes_no_batch_to_escape_the_cancel(project: Path) -> None:
    with ScriptedServer(SCRIPT, batch=BatchBehaviour(polls=1, hold=frozenset({"create"}))) as server:
        file_id = _killed_while_creating(project, server)
        restarted = _next_run_lands_the_old_create_late(project, server, file_id, "--restart")
        assert restarted.returncode == 0, restarted.stderr
        _landed_late_and_failed(server, file_id)
        assert not any(b.status in ("validating", "in_progress") for b in server.batches.batches.values())
    assert {r["status"] for r in records(project / "out.jsonl").values()} == {"done"}


def test_a_create_that_landed_before_the_resume_looked_is_reattached(project: Path) -> None:
    with ScriptedServer(SCRIPT, batch=BatchBehaviour(polls=1, hold=frozenset({"create"}))) as server:
        file_id = _killed_while_creating(project, server)
        server.batches.behaviour = BatchBehaviour(polls=1)
        server.batches.release()  # lands before the resume
        assert wait_until(lambda: server.batches.batches_created == 1)
        argv, env = command(project, server, "triage_ticket", *_args(project))
        resumed = subprocess.run(argv, cwd=project, env=env, capture_output=True, text=True, timeout=240)
        assert resumed.returncode == 0, resumed.stderr
        assert server.batches.batches_created == 1 and len(server.billed) == 3  # re-attached, nothing twice
        assert file_id in server.batches.deleted and server.batches.deleted_in_use == []  # deleted once collected
    assert {r["status"] for r in records(project / "out.jsonl").values()} == {"done"}
