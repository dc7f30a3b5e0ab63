"""What a RunnerTaskOperator's task log shows (``dag.test()`` of the example daily DAG): the
run's readable progress and its summary, never the key; and a worker that cannot write the project's state fails once, naming the fix."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.support.services import import_or_missing

pytestmark = [pytest.mark.airflow, pytest.mark.timeout(240), pytest.mark.filterwarnings("ignore::DeprecationWarning")]
import_or_missing("airflow", "apache-airflow is not installed (pip install 'runner[airflow]')")

LOGICAL_DATE = datetime(2025, 6, 3, tzinfo=UTC)


def _state(dag_run: Any) -> tuple[str, int]:
    (ti,) = dag_run.get_task_instances()
    return str(ti.state), ti.try_number


def test_the_task_log_shows_the_runs_progress_and_summary_never_the_key(
    airflow_db: float, project: Path, scripted_server: Any, model_connection: Any, canary_key: str,
    capfd: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    from runner.airflow.example_dags.daily_report import dag

    with scripted_server({"fallback": "All quiet."}) as server:
        model_connection(server.base_url)
        dag_run = dag.test(logical_date=LOGICAL_DATE)
    logged = "".join(capfd.readouterr())
    assert _state(dag_run) == ("success", 1)
    assert "run daily_report-af-" in logged and "started: task daily_report" in logged
    assert "think #1 gpt-4o-mini: answer" in logged and "| spent $" in logged
    assert "completed (exit 0): 1 model call(s), 0 tool call(s)" in logged
    assert canary_key not in logged


def test_a_state_directory_the_worker_cannot_write_fails_once_naming_the_fix(
    airflow_db: float, project: Path, tmp_path: Path, scripted_server: Any, model_connection: Any,
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    from runner.airflow.example_dags.daily_report import dag

    (project / ".runner").write_text("not a directory")  # as root, permission bits would not stop a write
    with scripted_server({"fallback": "All quiet."}) as server:
        model_connection(server.base_url)
        refused = dag.test(logical_date=LOGICAL_DATE)
        logged = "".join(capfd.readouterr())
        assert server.requests == []
        monkeypatch.setenv("RUNNER_STATE_DIR", str(tmp_path / "state"))
        ran = dag.test(logical_date=datetime(2025, 6, 4, tzinfo=UTC))
    assert _state(refused) == ("failed", 1), "a worker that cannot write its state is not retried"
    assert f"cannot use {project / '.runner'}" in logged and "is a file, not a directory" in logged and "set $RUNNER_STATE_DIR" in logged
    assert "runner.errors.UsageError" not in logged, "the message, not the runner's traceback"
    assert _state(ran) == ("success", 1)
    assert (tmp_path / "state" / "runs.sqlite3").is_file()


def test_progress_lines_escape_control_characters_and_redact_secrets() -> None:
    import logging

    from runner.airflow.progress import TaskLogProgress

    records: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record.getMessage())

    log = logging.getLogger("runner.test.progress")
    log.addHandler(Collect())
    log.setLevel(logging.INFO)
    sink = TaskLogProgress(log, ["sk-listed-secret-0123456789"])
    sink({"event": "tool_call", "step_id": "s", "name": "fetch", "arguments": "{}", "status": "ok",
          "output_excerpt": "key sk-listed-secret-0123456789 \x1b]0;title\x07 and\n[fake] run X completed"})  # fmt: skip
    sink({"event": "step_finished", "step": "s", "status": "failed", "duration_seconds": 1.0, "cost_usd": 0.0,
          "error": "auth: Bearer sk-unlisted-abcdefghijklmnop refused"})  # fmt: skip
    assert len(records) == 2, records  # one record per event: text cannot start a line of its own
    assert "\\x1b]0;title\\x07" in records[0] and "sk-listed-secret" not in records[0]
    assert "sk-unlisted-abcdefghijklmnop" not in records[1] and "[s] failed in 1.0s" in records[1]
