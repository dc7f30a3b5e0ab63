"""Trial runs and --retry-failed with ``runner batch --via batch-api`` (issue 24), as a real process
against the loopback server's Batch API: a trial's rows go out in the provider batch and stay in the
journal, so the full run sends only the others."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runner.model.batch_endpoints import BatchBehaviour
from runner.model.server import ScriptedServer
from tests.cli.batch_api_project import (
    TRIAGE_SCRIPT,
    batch_inputs,
    chat_calls,
    records,
    row_of,
    tickets,
    triage,
    via_api,
)
from tests.support.project import copy_shipped

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return copy_shipped(tmp_path / "project")


def sent_rows(server: ScriptedServer) -> list[list[str]]:
    """The rows of each provider batch the server was sent, in order."""
    return [sorted(row_of(line) for line in lines) for lines in batch_inputs(server)]


def test_a_limit_trial_then_the_full_run_sends_each_row_in_a_provider_batch_once(project: Path) -> None:
    source, out = tickets(project, 5), project / "out.jsonl"
    with ScriptedServer(TRIAGE_SCRIPT, batch=BatchBehaviour(polls=1)) as server:
        trial = triage(project, server, *via_api(source, out, "--limit", "2", "--json"))
        assert trial.returncode == 0, trial.stderr
        summary = json.loads(trial.stdout)
        assert (summary["trial_rows"], summary["rows_left_for_later"]) == (2, 3)
        assert sent_rows(server) == [["t1", "t2"]] and sorted(records(out)) == ["t1", "t2"]
        full = triage(project, server, *via_api(source, out, "--json"))
        assert full.returncode == 0, full.stderr
        assert sent_rows(server) == [["t1", "t2"], ["t3", "t4", "t5"]] and chat_calls(server) == []
    assert json.loads(full.stdout)["counts"]["done"] == 5 and sorted(records(out)) == ["t1", "t2", "t3", "t4", "t5"]


def test_a_sample_trial_picks_the_same_rows_as_a_live_one_and_they_count_toward_the_full_run(project: Path) -> None:
    source = tickets(project, 6)
    with ScriptedServer(TRIAGE_SCRIPT, batch=BatchBehaviour(polls=1)) as server:
        live = triage(project, server, "--input", str(source), "--output", str(project / "live.jsonl"), "--id-column",
                      "id", "--journal", str(project / "live.sqlite3"), "--sample", "3", "--seed", "4", "--progress", "none")
        assert live.returncode == 0, live.stderr
        trial = triage(project, server, *via_api(source, project / "out.jsonl", "--sample", "3", "--seed", "4"))
        assert trial.returncode == 0, trial.stderr
        (picked,) = sent_rows(server)
        assert picked == sorted(records(project / "live.jsonl")) and len(picked) == 3
        full = triage(project, server, *via_api(source, project / "out.jsonl"))
        assert full.returncode == 0, full.stderr
        assert sorted(row for rows in sent_rows(server) for row in rows) == [f"t{i}" for i in range(1, 7)]  # each row sent once


def test_retry_failed_sends_a_row_whose_attempts_are_used_up_in_a_provider_batch_once_more(project: Path) -> None:
    script = {"rules": [{"when": {"last_message": "It crashes 2"}, "times": 1, "reply": {"fault": {"status": 400}}}],
              **TRIAGE_SCRIPT}  # fmt: skip
    source, out = tickets(project, 3), project / "out.jsonl"
    with ScriptedServer(script, batch=BatchBehaviour(polls=1)) as server:
        first = triage(project, server, *via_api(source, out, "--max-attempts", "1"))
        assert first.returncode == 1, first.stderr
        rerun = triage(project, server, *via_api(source, out, "--max-attempts", "1"))
        assert rerun.returncode == 1 and "--retry-failed" in rerun.stdout and len(sent_rows(server)) == 1
        retried = triage(project, server, *via_api(source, out, "--max-attempts", "1", "--retry-failed"))
        assert retried.returncode == 0, retried.stdout + retried.stderr
        assert sent_rows(server)[1:] == [["t2"]]
    assert records(out)["t2"]["status"] == "done"
