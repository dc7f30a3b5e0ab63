"""Killing a RunnerBatchOperator(via="batch-api") while it runs in the worker: Airflow's SIGTERM
handler calls ``on_kill``, which cancels the provider batches the batch has out (both modes;
the deferred case is the trigger's ``on_kill``, tests/airflow/test_airflow_triggers.py).
``cancel_on_kill=False`` leaves them running for the next try to re-attach to."""

from __future__ import annotations

import json
import os
import signal
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.support.services import import_or_missing

pytestmark = [pytest.mark.airflow, pytest.mark.timeout(240), pytest.mark.filterwarnings("ignore::DeprecationWarning")]
import_or_missing("airflow", "apache-airflow is not installed (pip install 'runner[airflow]')")

from runner.model.batch_endpoints import BatchBehaviour  # noqa: E402
from tests.cli.batch_api_project import wait_until  # noqa: E402

SCRIPT: dict[str, Any] = {"fallback": {"content": "label: ok", "usage": {"prompt_tokens": 40, "completion_tokens": 5}}}


def _rows(path: Path, count: int = 3) -> Path:
    path.write_text("".join(json.dumps({"id": f"r{i}", "text": f"item {i}"}) + "\n" for i in range(1, count + 1)))
    return path


def test_sigterm_in_the_waiting_worker_cancels_the_provider_batch(
    airflow_db: float, project: Path, tmp_path: Path, scripted_server: Any, model_connection: Any, test_dags: Any,
    capfd: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    source = _rows(tmp_path / "rows.jsonl")
    before = signal.getsignal(signal.SIGTERM)
    killed: list[bool] = []
    with scripted_server(SCRIPT, batch=BatchBehaviour(polls=10_000)) as server:
        model_connection(server.base_url)

        def kill_the_worker() -> None:
            polled = wait_until(lambda: any(b.polls >= 2 for b in server.batches.batches.values()))
            handler = signal.getsignal(signal.SIGTERM)
            if polled and handler not in (signal.SIG_DFL, signal.SIG_IGN, before):  # Airflow's task runner handler
                killed.append(True)
                os.kill(os.getpid(), signal.SIGTERM)
                wait_until(lambda: any(r.path.endswith("/cancel") for r in server.requests))
            server.batches.behaviour = BatchBehaviour(polls=1)  # the retry of the cancelled rows ends at once

        killer = threading.Thread(target=kill_the_worker)
        killer.start()
        try:
            test_dags.batch_waiting_dag.test(run_conf={"input_path": str(source), "via": "batch-api"})
        finally:
            killer.join()
            signal.signal(signal.SIGTERM, before)
        assert killed == [True], "the batch was never out in the worker, or Airflow installed no SIGTERM handler"
        first = min(server.batches.batches)
        assert server.batches.batches[first].status in ("cancelling", "cancelled")
        assert [r.path for r in server.requests if r.path.endswith("/cancel")] == [f"/v1/batches/{first}/cancel"]
    assert f"cancelled provider batch {first}" in "".join(capfd.readouterr())


def test_on_kill_cancels_what_the_watch_has_out_unless_cancel_on_kill_is_false(
    project: Path, tmp_path: Path, scripted_server: Any,
) -> None:  # fmt: skip
    import asyncio

    from runner.airflow.batch_operator import RunnerBatchOperator
    from runner.batch.file_batch import run_batch_file
    from runner.batch.provider_cancel import ProviderWatch
    from runner.batch.request import BatchRequest
    from runner.config.project import load_project_or_raise

    spec = load_project_or_raise(project)
    with scripted_server(SCRIPT, batch=BatchBehaviour(polls=10_000)) as server:
        watch = ProviderWatch()
        request = BatchRequest(
            input_path=_rows(tmp_path / "rows.jsonl"), output_path=tmp_path / "out.jsonl", id_column="id", via="batch-api",
            batch_poll_seconds=0.01, progress="none", provider_wait=False, base_url_override=server.base_url,
            api_key="sk-test-kill", store_path=tmp_path / "runs.sqlite", watch=watch,
        )  # fmt: skip
        summary = asyncio.run(run_batch_file(spec, spec.tasks["classify"], request))
        (pending,) = summary["provider_pending"]
        assert watch.out == (pending,)
        operator = RunnerBatchOperator(task_id="t", task="classify", input_path="rows.jsonl", cancel_on_kill=False)
        operator._watch = watch
        operator.on_kill()
        assert server.batches.batches[pending].status == "in_progress"  # left for the next try
        operator.cancel_on_kill = True
        operator.on_kill()
        assert server.batches.batches[pending].status == "cancelling"
        RunnerBatchOperator(task_id="u", task="classify", input_path="rows.jsonl").on_kill()  # nothing ran: nothing to do
