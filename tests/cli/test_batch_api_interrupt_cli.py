"""Stopping ``runner batch --via batch-api`` while its provider batch is out, and starting over.

- Ctrl-C (SIGINT) and SIGTERM keep the provider batch (no cancel): the command exits 130 and
  says which batches are out, that rerunning the same command re-attaches to them (nothing is
  submitted or paid twice), and how to cancel them instead. The rerun collects them.
- ``--restart`` cancels the batches the discarded journal had out (saying so on stderr), also
  one created after its process died (found by its metadata) and also when the new run is
  live; their input files are deleted once the cancelled batches have ended. A batch it cannot
  reach is named with how to cancel it by hand.
"""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest

from runner.model.batch_endpoints import BatchBehaviour
from runner.model.server import ScriptedServer
from tests.cli.batch_api_project import (
    TRIAGE_SCRIPT,
    chat_calls,
    command,
    provider_state,
    records,
    tickets,
    via_api,
    wait_until,
)
from tests.cli.batch_api_project import run as run_task
from tests.support.project import copy_shipped

pytestmark = pytest.mark.timeout(300)
SCRIPT = TRIAGE_SCRIPT


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return copy_shipped(tmp_path / "project")


def _args(root: Path, *extra: str) -> tuple[str, ...]:
    return via_api(tickets(root, 3), root / "out.jsonl", "--journal", str(root / "journal.sqlite3"), *extra)


def _out_and_polled(server: ScriptedServer, journal: Path) -> bool:
    return bool((provider_state(journal) or {}).get("out")) and any(b.polls >= 2 for b in server.batches.batches.values())


def _stop_while_out(root: Path, server: ScriptedServer, signum: int) -> subprocess.CompletedProcess[str]:
    """Start the command, wait until its provider batch is out and polled, then send ``signum``."""
    argv, env = command(root, server, "triage_ticket", *_args(root))
    process = subprocess.Popen(argv, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_until(lambda: _out_and_polled(server, root / "journal.sqlite3")), "the batch was never out"
        process.send_signal(signum)
        stdout, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return subprocess.CompletedProcess(argv, process.returncode, stdout, stderr)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_an_interrupt_keeps_the_provider_batch_says_what_to_do_and_a_rerun_collects_it(project: Path, signum: int) -> None:
    with ScriptedServer(SCRIPT, batch=BatchBehaviour(polls=10_000)) as server:
        stopped = _stop_while_out(project, server, signum)
        assert stopped.returncode == 130, stopped.stderr
        (batch_id,) = server.batches.batches
        assert f"provider batch(es) {batch_id} keep running at the provider" in stopped.stderr
        assert "Rerun the same command" in stopped.stderr and "--restart" in stopped.stderr and "cancel" in stopped.stderr
        assert "Traceback" not in stopped.stderr
        assert server.batches.batches[batch_id].status == "in_progress"  # not cancelled
        assert [b["id"] for b in provider_state(project / "journal.sqlite3")["out"]] == [batch_id]  # type: ignore[index]
        server.batches.behaviour = BatchBehaviour(polls=1)
        again = run_task(project, server, "triage_ticket", *_args(project))
        assert again.returncode == 0, again.stderr
        assert server.batches.batches_created == 1 and server.batches.batches[batch_id].status == "completed"
        assert chat_calls(server) == [] and len(server.billed) == 3  # nothing paid twice
    assert {r["status"] for r in records(project / "out.jsonl").values()} == {"done"}


def test_restart_cancels_the_batch_the_last_run_left_out_and_later_deletes_its_file(project: Path) -> None:
    with ScriptedServer(SCRIPT, batch=BatchBehaviour(polls=10_000)) as server:
        assert _stop_while_out(project, server, signal.SIGINT).returncode == 130
        (old,) = server.batches.batches
        old_file = server.batches.batches[old].input_file_id
        server.batches.behaviour = BatchBehaviour(polls=1)
        restarted = run_task(project, server, "triage_ticket", *_args(project, "--restart"))
        assert restarted.returncode == 0, restarted.stderr
        assert f"--restart: cancelled provider batch {old}" in restarted.stderr
        assert server.batches.batches[old].status == "cancelling" and server.batches.batches_created == 2
        assert old_file not in server.batches.deleted and server.batches.deleted_in_use == []  # still read while cancelling
        state = provider_state(project / "journal.sqlite3")
        assert [f["id"] for f in state["files"]] == [old_file]  # type: ignore[index]
        server.batches.retrieve(old)  # the provider ends the cancelled batch
        again = run_task(project, server, "triage_ticket", *_args(project))
        assert again.returncode == 0, again.stderr
        assert old_file in server.batches.deleted and server.batches.deleted_in_use == []
    assert {r["status"] for r in records(project / "out.jsonl").values()} == {"done"}


def test_restart_finds_and_cancels_a_batch_created_after_its_process_died(project: Path) -> None:
    behaviour = BatchBehaviour(polls=10_000, hold=frozenset({"created"}))
    with ScriptedServer(SCRIPT, batch=behaviour) as server:
        argv, env = command(project, server, "triage_ticket", *_args(project))
        process = subprocess.Popen(argv, cwd=project, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            assert wait_until(lambda: server.batches.holding("created") > 0)
        finally:
            process.send_signal(signal.SIGKILL)
            process.wait(timeout=30)
        server.batches.behaviour = BatchBehaviour(polls=1)
        server.batches.release()
        (old,) = server.batches.batches
        assert provider_state(project / "journal.sqlite3")["out"] == []  # type: ignore[index]  # its id was never recorded
        restarted = run_task(project, server, "triage_ticket", *_args(project, "--restart"))
        assert restarted.returncode == 0, restarted.stderr
        assert f"--restart: cancelled provider batch {old}" in restarted.stderr
        assert server.batches.batches[old].status == "cancelling" and server.batches.batches_created == 2


def test_restart_into_a_live_run_cancels_them_too(project: Path) -> None:
    with ScriptedServer(SCRIPT, batch=BatchBehaviour(polls=10_000)) as server:
        assert _stop_while_out(project, server, signal.SIGTERM).returncode == 130
        (old,) = server.batches.batches
        restarted = run_task(project, server, "triage_ticket", *_args(project, "--restart", "--via", "live"))
        assert restarted.returncode == 0, restarted.stderr
        assert f"--restart: cancelled provider batch {old}" in restarted.stderr
        assert server.batches.batches[old].status == "cancelling" and len(chat_calls(server)) == 3


def test_restart_with_nothing_out_cancels_nothing(project: Path) -> None:
    with ScriptedServer(SCRIPT, batch=BatchBehaviour(polls=1)) as server:
        first = run_task(project, server, "triage_ticket", *_args(project))
        assert first.returncode == 0, first.stderr
        restarted = run_task(project, server, "triage_ticket", *_args(project, "--restart"))
        assert restarted.returncode == 0, restarted.stderr
        assert "--restart:" not in restarted.stderr and server.batches.batches_created == 2
        assert not [r for r in server.requests if r.path.endswith("/cancel")]


def test_restart_names_a_batch_it_cannot_reach_and_how_to_cancel_it(project: Path) -> None:
    with ScriptedServer(SCRIPT, batch=BatchBehaviour(polls=10_000)) as first, ScriptedServer(SCRIPT, batch=BatchBehaviour(polls=1)) as other:
        assert _stop_while_out(project, first, signal.SIGINT).returncode == 130
        (old,) = first.batches.batches
        restarted = run_task(project, first, "triage_ticket", *_args(project, "--restart", "--base-url", other.base_url))
        assert restarted.returncode == 0, restarted.stderr
        assert f"--restart: provider batch {old} of the previous run is at" in restarted.stderr
        assert f"/batches/{old}/cancel" in restarted.stderr and "Traceback" not in restarted.stderr
        assert first.batches.batches[old].status == "in_progress" and other.batches.batches_created == 1
