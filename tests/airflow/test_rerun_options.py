"""The rerun options of issue 24 reach the Airflow operators and the Python API as the CLI's flags do."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runner.airflow.options import typed_options
from runner.api import run_batch
from runner.errors import UsageError
from runner.model.server import ScriptedServer
from tests.support.project import copy_shipped

TRIAGE = '{"category": "bug", "urgency": "high", "summary": "It crashes."}'


def test_keep_answers_and_retry_failed_are_fanout_options_typed_from_rendered_text() -> None:
    options = typed_options({"keep_answers": "true", "retry_failed": True})
    assert options["keep_answers"] and options["retry_failed"]
    assert not typed_options({})["keep_answers"]
    with pytest.raises(UsageError, match="keep_answers"):
        typed_options({"keep_answers": "maybe"})


def test_a_trial_limit_in_a_fanout_is_refused_by_name_not_ignored() -> None:
    with pytest.raises(UsageError, match="'limit' is not an option here: a trial's rows stay in its journal"):
        typed_options({"limit": 5})


def test_the_python_api_runs_a_trial_then_the_rest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = copy_shipped(tmp_path / "project", ("agents.d", "tasks.d"))
    rows = root / "rows.jsonl"
    rows.write_text("".join(json.dumps({"id": f"r{i}", "subject": f"Crash {i}", "body": "It crashes"}) + "\n" for i in range(6)))
    with ScriptedServer({"fallback": {"content": TRIAGE}}) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test-api")
        trial = run_batch("triage_ticket", root=root, input_path=rows, output_path=root / "out.jsonl", id_column="id", limit=2)
        assert trial["exit_code"] == 0 and trial["trial_rows"] == 2 and len(server.requests) == 2
        full = run_batch("triage_ticket", root=root, input_path=rows, output_path=root / "out.jsonl", id_column="id",
                         keep_columns="subject")  # fmt: skip
        assert full["done"] == 6 and len(server.requests) == 6
    first = json.loads((root / "out.jsonl").read_text().splitlines()[0])
    assert first["input"] == {"subject": "Crash 0"} and first["fingerprint"] == full["fingerprint"]
