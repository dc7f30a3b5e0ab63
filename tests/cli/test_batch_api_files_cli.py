"""The input files ``runner batch --via batch-api`` uploads are deleted from the provider once
no batch needs them: after their batch is collected (its answers are in the run store), or
when their batch was never created (the create was refused, or the process was killed between
upload and create: the resume finds the file by its id or by its name). A file that backs a
batch that has not ended is never deleted; a delete that fails is tried again by the next run."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest

from runner.model.batch_endpoints import BatchBehaviour
from runner.model.server import ScriptedServer
from tests.cli.batch_api_project import (
    TRIAGE_SCRIPT,
    command,
    provider_state,
    records,
    tickets,
    triage,
    via_api,
    wait_until,
)
from tests.support.project import copy_shipped

pytestmark = pytest.mark.timeout(300)
SCRIPT = TRIAGE_SCRIPT


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return copy_shipped(tmp_path / "project")


def uploads(server: ScriptedServer) -> set[str]:
    return {f.id for f in server.batches.files.values() if f.purpose == "batch"}


def left_at_the_provider(server: ScriptedServer) -> set[str]:
    return {f.id for f in server.batches.files.values() if f.purpose == "batch" and not f.deleted}


def test_every_input_file_is_deleted_once_its_batch_is_collected(project: Path) -> None:
    source, out, journal = tickets(project, 3), project / "out.jsonl", project / "journal.sqlite3"
    script = {"rules": [{"when": {"last_message": "Ticket 2"}, "times": 1, "reply": {"fault": {"status": 500}}}], **SCRIPT}
    with ScriptedServer(script, batch=BatchBehaviour(polls=1)) as server:
        result = triage(project, server, *via_api(source, out, "--journal", str(journal), "--progress", "log"))
        assert result.returncode == 0, result.stderr
        assert server.batches.batches_created == 2 and len(uploads(server)) == 2  # the retry went in a second batch
        assert left_at_the_provider(server) == set() and server.batches.deleted_in_use == []
        outputs = [f for f in server.batches.files.values() if f.purpose == "batch_output"]
        assert outputs and not any(f.deleted for f in outputs)  # the provider's output files are left to it
    assert "deleted uploaded input file(s)" in result.stderr
    assert provider_state(journal)["files"] == []  # type: ignore[index]
    assert {r["status"] for r in records(out).values()} == {"done"}


def test_a_refused_create_deletes_the_file_it_uploaded(project: Path) -> None:
    source, out, journal = tickets(project, 2), project / "out.jsonl", project / "journal.sqlite3"
    with ScriptedServer(SCRIPT, batch=BatchBehaviour(polls=1, refuse_creates=1)) as server:
        result = triage(project, server, *via_api(source, out, "--journal", str(journal)))
        (uploaded,) = uploads(server)
        assert server.batches.batches_created == 0 and server.batches.deleted == [uploaded]
    assert result.returncode == 1 and "Traceback" not in result.stderr  # the refusal fails the rows, as before
    assert {r["error_kind"] for r in records(out).values()} == {"bad_request"}
    assert provider_state(journal) == {"files": [], "intents": [], "out": [], "rounds": 1}


# point held -> (whether the held request did its work, whether a batch then exists)
KILLED_AT = {"upload-completes": ("upload", True), "create-dropped": ("create", False), "create-completes": ("create", True)}


@pytest.mark.parametrize("case", sorted(KILLED_AT))
def test_kill_9_between_upload_and_create_then_resume_deletes_the_orphan_file(project: Path, case: str) -> None:
    point, completes = KILLED_AT[case]
    source, out, journal = tickets(project, 3), project / "out.jsonl", project / "journal.sqlite3"
    with ScriptedServer(SCRIPT, batch=BatchBehaviour(polls=1, hold=frozenset({point}))) as server:
        argv, env = command(project, server, "triage_ticket", *via_api(source, out, "--journal", str(journal)))
        process = subprocess.Popen(argv, cwd=project, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            assert wait_until(lambda: server.batches.holding(point) > 0), f"never reached {point}"
        finally:
            process.send_signal(signal.SIGKILL)
            process.wait(timeout=30)
        server.batches.behaviour = BatchBehaviour(polls=1)
        server.batches.release(drop=not completes)
        if point == "upload":  # the upload lands after its process died: the journal never learnt the file's id
            assert wait_until(lambda: len(uploads(server)) == 1)
            (intent,) = provider_state(journal)["intents"]  # type: ignore[index]
            assert intent.get("file_id") is None
        else:
            assert wait_until(lambda: server.batches.batches_created == int(completes))
        orphans = uploads(server)
        resumed = subprocess.run(argv, cwd=project, env=env, capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL)
        assert resumed.returncode == 0, resumed.stderr
        assert server.batches.batches_created == 1  # no round twice
        assert left_at_the_provider(server) == set() and server.batches.deleted_in_use == []
        assert orphans <= set(server.batches.deleted)
    assert all(r["status"] == "done" for r in records(out).values())


def test_a_delete_that_fails_leaves_the_run_whole_and_the_next_run_deletes_the_file(project: Path) -> None:
    source, out, journal = tickets(project, 2), project / "out.jsonl", project / "journal.sqlite3"
    with ScriptedServer(SCRIPT, batch=BatchBehaviour(polls=1, fail_deletes=1000)) as server:
        first = triage(project, server, *via_api(source, out, "--journal", str(journal), "--progress", "log"))
        assert first.returncode == 0, first.stderr
        assert "could not delete uploaded input file(s)" in first.stderr and "the next run tries again" in first.stderr
        (uploaded,) = uploads(server)
        assert left_at_the_provider(server) == {uploaded}
        assert [f["id"] for f in provider_state(journal)["files"]] == [uploaded]  # type: ignore[index]
        server.batches.behaviour = BatchBehaviour(polls=1)
        again = triage(project, server, *via_api(source, out, "--journal", str(journal)))
        assert again.returncode == 0, again.stderr
        assert left_at_the_provider(server) == set() and server.batches.batches_created == 1
    assert provider_state(journal)["files"] == []  # type: ignore[index]
