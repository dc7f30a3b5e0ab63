"""A provider batch run without waiting: submit, return its id, collect it on the next call.

This is what the deferrable Airflow operator does between its tries: the rows wait (``not_run``,
``provider_pending``) while a round is out, and the same request run again re-attaches to the
same batch, collects it and goes on to the next round.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from runner.batch.file_batch import run_batch_file
from runner.batch.request import BatchRequest
from runner.config.project import load_project_or_raise
from runner.model.batch_endpoints import BatchBehaviour
from runner.model.server import ScriptedServer
from tests.support.project import copy_shipped

TRIAGE = {"category": "bug", "urgency": "high", "summary": "It crashes."}
USAGE = {"prompt_tokens": 100, "completion_tokens": 20}
SCRIPT: dict[str, Any] = {"fallback": {"content": json.dumps(TRIAGE), "usage": USAGE}}
BATCH_COST = (100 * 0.15 + 20 * 0.60) / 1_000_000 / 2  # one call at the batch price


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = copy_shipped(tmp_path / "project")
    lines = [{"id": f"t{i}", "subject": f"Ticket {i}", "body": f"It crashes {i}"} for i in range(1, 4)]
    (root / "tickets.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    return root


def _run(root: Path, server: ScriptedServer, *, wait: bool, max_attempts: int = 2) -> dict[str, Any]:
    project = load_project_or_raise(root)
    request = BatchRequest(
        input_path=root / "tickets.jsonl", output_path=root / "out.jsonl", id_column="id", via="batch-api",
        batch_poll_seconds=0.01, progress="none", provider_wait=wait, base_url_override=server.base_url,
        api_key="sk-test-no-wait", store_path=root / "runs.sqlite", max_attempts=max_attempts,
    )
    return asyncio.run(run_batch_file(project, project.tasks["triage_ticket"], request))


def test_without_waiting_the_batch_id_comes_back_and_the_next_call_collects_it(project: Path) -> None:
    with ScriptedServer(SCRIPT, batch=BatchBehaviour(polls=3)) as server:
        first = _run(project, server, wait=False)
        (pending,) = first["provider_pending"]
        assert first["counts"]["not_run"] == 3 and server.batches.batches[pending].status == "in_progress"
        assert not (project / "out.jsonl").exists()  # nothing to write until the rows are answered
        again = _run(project, server, wait=False)  # still running: nothing sent again
        assert again["provider_pending"] == [pending] and server.batches.batches_created == 1
        second = _run(project, server, wait=True)
        assert server.batches.batches_created == 1  # re-attached, not submitted again
    assert second["provider_pending"] == [] and second["counts"]["done"] == 3 and second["exit_code"] == 0
    rows = [json.loads(line) for line in (project / "out.jsonl").read_text().splitlines()]
    assert len(rows) == 3 and all(r["output"] == TRIAGE for r in rows)
    assert all(r["cost_usd"] == pytest.approx(BATCH_COST) for r in rows)  # answered after the caller returned: still counted once


def test_each_call_without_waiting_collects_the_round_out_and_sends_the_next(project: Path) -> None:
    script = {"rules": [{"when": {"last_message": "Ticket 1"}, "times": 1, "reply": {"content": "not json", "usage": USAGE}}], **SCRIPT}
    with ScriptedServer(script, batch=BatchBehaviour(polls=2)) as server:
        first = _run(project, server, wait=False)
        second = _run(project, server, wait=False)  # collects round 1; the repair turn of ticket 1 goes out
        third = _run(project, server, wait=False)
        assert server.batches.batches_created == 2
    assert first["provider_pending"] != second["provider_pending"] and len(second["provider_pending"]) == 1
    assert (second["counts"]["done"], second["counts"]["not_run"]) == (2, 1)
    assert third["provider_pending"] == [] and third["counts"]["done"] == 3 and third["exit_code"] == 0
    rows = {r["id"]: r for r in map(json.loads, (project / "out.jsonl").read_text().splitlines())}
    assert rows["t1"]["cost_usd"] == pytest.approx(2 * BATCH_COST) and rows["t2"]["cost_usd"] == pytest.approx(BATCH_COST)


def test_a_batch_that_already_ended_is_collected_in_the_same_call(project: Path) -> None:
    with ScriptedServer(SCRIPT, batch=BatchBehaviour(polls=1)) as server:
        result = _run(project, server, wait=False)
    assert result["provider_pending"] == [] and result["counts"]["done"] == 3


def test_shards_sharing_a_cap_scope_each_send_their_rows_in_provider_batches(project: Path) -> None:
    from runner.batch.request import SharedScope
    from runner.config.specs import Caps
    from runner.store.cap_ledger import CapLedger
    from runner.store.connect import open_database

    scope = SharedScope("fan-out:test", Caps(max_cost_usd=1.0), sqlite_path=project / "ledger.sqlite3")
    project_spec = load_project_or_raise(project)
    with ScriptedServer(SCRIPT, batch=BatchBehaviour(polls=1)) as server:
        results = []
        for first, last in ((1, 2), (3, 3)):
            request = BatchRequest(
                input_path=project / "tickets.jsonl", output_path=project / f"out-{first}.jsonl", id_column="id",
                via="batch-api", batch_poll_seconds=0.01, progress="none", base_url_override=server.base_url,
                api_key="sk-test-shards", store_path=project / "runs.sqlite", rows=(first, last), shared_scope=scope,
                batch_caps=Caps(max_cost_usd=1.0), journal_path=project / f"journal-{first}.sqlite3",
            )
            results.append(asyncio.run(run_batch_file(project_spec, project_spec.tasks["triage_ticket"], request)))
        assert server.batches.batches_created == 2
    assert [r["counts"]["done"] for r in results] == [2, 1] and all(r["exit_code"] == 0 for r in results)
    ledger = CapLedger(open_database(project / "ledger.sqlite3"))
    try:
        spent = ledger.scope("fan-out:test").spent
    finally:
        ledger.db.close()
    assert spent.cost_usd == pytest.approx(3 * BATCH_COST) and spent.model_calls == 3


def test_a_round_that_expired_while_nobody_waited_fails_its_rows_once_instead_of_resending(project: Path) -> None:
    with ScriptedServer(SCRIPT, batch=BatchBehaviour(polls=2, outcome="expired")) as server:
        # one attempt each (waiting for the round used none): collecting the expired round fails each row once
        first = _run(project, server, wait=False, max_attempts=1)
        second = _run(project, server, wait=False, max_attempts=1)
        assert server.batches.batches_created == 1
    assert len(first["provider_pending"]) == 1 and second["provider_pending"] == []
    assert second["counts"]["failed"] == 3 and second["exit_code"] == 1
    rows = [json.loads(line) for line in (project / "out.jsonl").read_text().splitlines()]
    assert {(r["status"], r["error_kind"]) for r in rows} == {("failed", "batch_expired")} and all(r["cost_usd"] == 0 for r in rows)


def _run_until_collected(root: Path, server: ScriptedServer, *, max_attempts: int, limit: int = 20) -> list[dict[str, Any]]:
    """Run the request without waiting until nothing is out (the deferrable operator's loop)."""
    project = load_project_or_raise(root)
    request = BatchRequest(
        input_path=root / "tickets.jsonl", output_path=root / "out.jsonl", id_column="id", via="batch-api",
        batch_poll_seconds=0.01, progress="none", provider_wait=False, base_url_override=server.base_url,
        api_key="sk-test-no-wait", store_path=root / "runs.sqlite", max_attempts=max_attempts,
    )
    results: list[dict[str, Any]] = []
    while not results or results[-1]["provider_pending"]:
        assert len(results) < limit, "the batch never finished"
        results.append(asyncio.run(run_batch_file(project, project.tasks["triage_ticket"], request)))
    return results


def test_waiting_for_a_provider_batch_uses_up_no_attempt(project: Path) -> None:
    with ScriptedServer(SCRIPT, batch=BatchBehaviour(polls=4)) as server:  # each round out over several calls
        results = _run_until_collected(project, server, max_attempts=1)
    assert len(results) >= 3  # more calls than attempts allowed, each one a deferral
    assert results[-1]["counts"]["done"] == 3 and results[-1]["exit_code"] == 0
    rows = [json.loads(line) for line in (project / "out.jsonl").read_text().splitlines()]
    assert [r["attempts"] for r in rows] == [1, 1, 1]


def test_a_real_failure_after_many_deferrals_still_has_its_retry(project: Path) -> None:
    script = {"rules": [{"when": {"last_message": "Ticket 2"}, "times": 1, "reply": {"fault": {"status": 500}}}], **SCRIPT}
    with ScriptedServer(script, batch=BatchBehaviour(polls=3)) as server:
        results = _run_until_collected(project, server, max_attempts=2)
        assert server.batches.batches_created == 2  # the failed line's retry went in a second batch
    assert len(results) > 2 and results[-1]["exit_code"] == 0
    rows = {r["id"]: r for r in map(json.loads, (project / "out.jsonl").read_text().splitlines())}
    assert {r["status"] for r in rows.values()} == {"done"}
    assert (rows["t1"]["attempts"], rows["t2"]["attempts"], rows["t3"]["attempts"]) == (1, 2, 1)  # only the failure counted


def test_a_row_that_keeps_failing_still_stops_at_max_attempts_without_waiting(project: Path) -> None:
    script = {"rules": [{"when": {"last_message": "Ticket 2"}, "reply": {"fault": {"status": 500}}}], **SCRIPT}
    with ScriptedServer(script, batch=BatchBehaviour(polls=2)) as server:
        results = _run_until_collected(project, server, max_attempts=2)
    assert results[-1]["exit_code"] == 1
    rows = {r["id"]: r for r in map(json.loads, (project / "out.jsonl").read_text().splitlines())}
    assert (rows["t2"]["status"], rows["t2"]["error_kind"], rows["t2"]["attempts"]) == ("failed", "server_error", 2)


def test_the_input_file_of_a_batch_still_out_is_kept_until_it_is_collected(project: Path) -> None:
    with ScriptedServer(SCRIPT, batch=BatchBehaviour(polls=3)) as server:
        first = _run(project, server, wait=False)
        (pending,) = first["provider_pending"]
        input_file = server.batches.batches[pending].input_file_id
        assert server.batches.deleted == []  # the batch reads it: kept
        again = _run(project, server, wait=False)
        assert again["provider_pending"] == [pending] and server.batches.deleted == []
        last = _run(project, server, wait=False)
        assert last["provider_pending"] == [] and server.batches.deleted == [input_file]
        assert server.batches.deleted_in_use == [] and server.batches.batches[pending].status == "completed"
