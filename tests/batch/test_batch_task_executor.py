"""Batch rows through the real ``execute_task`` and openai SDK, against the loopback server."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from runner.batch.engine import batch_budget, run_batch
from runner.batch.executor import TaskExecutor
from runner.batch.inputs import InputSource, file_sha256, read_rows
from runner.batch.journal_open import open_batch_journal
from runner.batch.ratelimit import SharedRateLimiter
from runner.config.project import load_project_or_raise
from runner.config.specs import Caps
from runner.model.server import ScriptedServer
from runner.runs.options import RunOptions
from tests.batch.batch_fakes import write_csv

pytestmark = pytest.mark.timeout(120)

AGENT = {
    "apiVersion": "runner/v1",
    "kind": "Agent",
    "name": "triager",
    "model": {"id": "gpt-4o-mini", "max_tokens": 50, "retries": 2},
    "system_prompt": "You triage support tickets.",
}
TASK = {
    "apiVersion": "runner/v1",
    "kind": "Task",
    "name": "triage",
    "inputs": {"subject": {"type": "string"}, "priority": {"type": "string", "enum": ["low", "high"]}},
    "agent": "triager",
    "goal": "Triage this {{ inputs.priority }} ticket: {{ inputs.subject }}",
}


def write_project(root: Path) -> Path:
    (root / "agents.d").mkdir(parents=True)
    (root / "tasks.d").mkdir()
    (root / "agents.d/triager.yaml").write_text(yaml.safe_dump(AGENT), encoding="utf-8")
    (root / "tasks.d/triage.yaml").write_text(yaml.safe_dump(TASK), encoding="utf-8")
    return root


async def test_rows_run_through_execute_task_and_a_429_pauses_every_row(tmp_path: Path, journal_url: str | None) -> None:
    project = load_project_or_raise(write_project(tmp_path / "project"))
    task = project.task_for("triage")
    path = write_csv(
        tmp_path / "in.csv", [{"id": f"T{i}", "subject": f"printer {i}", "priority": "high"} for i in range(6)]
    )
    source = InputSource.open(path, id_column="id")
    script = {
        "rules": [
            {"times": 1, "reply": {"fault": {"status": 429, "retry_after": 0.2}}},
            {"when": {"last_message": "printer 3"}, "times": 1, "reply": {"fault": {"status": 400}}},
        ],
        "fallback": {"content": "category: hardware", "latency_seconds": 0.01},
    }
    gate = SharedRateLimiter(requests_per_minute=60_000)
    options = RunOptions(write_report=False, api_key="sk-batch-test-key", store_path=tmp_path / "runs.sqlite3")
    with ScriptedServer(script) as server:
        options.base_url_override = server.base_url
        journal = open_batch_journal(
            tmp_path / "journal.sqlite3", task="triage", input_path=path, input_sha256=file_sha256(path),
            database_url=journal_url,
        )
        async with TaskExecutor(project, task, rate_gate=gate, store_path=options.store_path) as executor:
            with journal:
                summary = await run_batch(
                    read_rows(source, task.inputs),
                    executor,
                    journal=journal,
                    budget=batch_budget(Caps(max_cost_usd=1.0)),
                    concurrency=3,
                    rate_gate=gate,
                    base_options=options,
                )
                records = list(journal.records())
        requests = server.requests
    assert gate.pauses >= 1  # the 429's Retry-After held the whole batch
    assert summary.counts["done"] == 5 and summary.counts["failed"] == 1
    failed = next(r for r in records if r.status == "failed")
    assert failed.id == "T3" and failed.error_kind == "bad_request" and failed.attempts == 1  # not retried
    done = [r for r in records if r.status == "done"]
    assert all(r.output == "category: hardware" and r.usage.cost_usd > 0 and r.run_id for r in done)
    assert summary.usage.cost_usd > 0
    assert all(req.auth_present for req in requests)
    if journal_url is None:
        assert "sk-batch-test-key" not in (tmp_path / "journal.sqlite3").read_bytes().decode("latin-1")
    else:
        import psycopg

        with psycopg.connect(journal_url) as db:
            stored = db.execute("SELECT string_agg(coalesce(error, '') || coalesce(output, ''), '') FROM journal_rows").fetchone()
        assert stored is not None and "sk-batch-test-key" not in (stored[0] or "")
