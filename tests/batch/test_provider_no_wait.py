"""A provider batch run without waiting: submit, return its id, collect it on the next call.

This is what the deferrable Airflow operator does between its tries: the rows stay running
while the batch is out, and the same request run again re-attaches to the same batch.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from runner.batch.file_batch import BatchRequest, run_batch_file
from runner.config.project import load_project_or_raise
from runner.model.batch_endpoints import BatchBehaviour
from runner.model.server import ScriptedServer

REPO = Path(__file__).resolve().parents[2]
TRIAGE = {"category": "bug", "urgency": "high", "summary": "It crashes."}
SCRIPT: dict[str, Any] = {"fallback": {"content": json.dumps(TRIAGE), "usage": {"prompt_tokens": 100, "completion_tokens": 20}}}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    for part in ("agents.d", "tasks.d"):
        shutil.copytree(REPO / part, root / part)
    lines = [{"id": f"t{i}", "subject": f"Ticket {i}", "body": f"It crashes {i}"} for i in range(1, 4)]
    (root / "tickets.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    return root


def _run(root: Path, server: ScriptedServer, *, wait: bool) -> dict[str, Any]:
    project = load_project_or_raise(root)
    request = BatchRequest(
        input_path=root / "tickets.jsonl", output_path=root / "out.jsonl", id_column="id", via="batch-api",
        batch_poll_seconds=0.01, progress="none", provider_wait=wait, base_url_override=server.base_url,
        api_key="sk-test-no-wait", store_path=root / "runs.sqlite",
    )
    return asyncio.run(run_batch_file(project, project.tasks["triage_ticket"], request))


def test_without_waiting_the_batch_id_comes_back_and_the_next_call_collects_it(project: Path) -> None:
    with ScriptedServer(SCRIPT, batch=BatchBehaviour(polls=3)) as server:
        first = _run(project, server, wait=False)
        assert len(first["provider_pending"]) == 1 and first["counts"]["running"] == 3
        assert not (project / "out.jsonl").exists()  # nothing to write until the rows are answered
        second = _run(project, server, wait=True)
        assert server.batches.batches_created == 1  # re-attached, not submitted again
    assert second["provider_pending"] == [] and second["counts"]["done"] == 3 and second["exit_code"] == 0
    assert len((project / "out.jsonl").read_text().splitlines()) == 3


def test_a_batch_that_already_ended_is_collected_in_the_same_call(project: Path) -> None:
    with ScriptedServer(SCRIPT, batch=BatchBehaviour(polls=1)) as server:
        result = _run(project, server, wait=False)
    assert result["provider_pending"] == [] and result["counts"]["done"] == 3
