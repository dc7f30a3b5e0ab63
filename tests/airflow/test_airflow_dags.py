"""End to end: ``dag.test()`` of the example and test DAGs against the loopback model server."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

# Airflow (and the libraries it pins) emit their own deprecation warnings inside dag.test(); the project
# turns warnings into errors, which would fail the Airflow task, so these are ignored here.
pytestmark = [pytest.mark.airflow, pytest.mark.timeout(240), pytest.mark.filterwarnings("ignore::DeprecationWarning")]
pytest.importorskip("airflow", reason="apache-airflow is not installed (pip install 'runner[airflow]')")

from runner.airflow.execution import derive_run_id  # noqa: E402

LOGICAL_DATE = datetime(2025, 6, 2, tzinfo=UTC)  # after the example DAGs' start_date


def _tis(dag_run: Any) -> dict[tuple[str, int], Any]:
    return {(ti.task_id, ti.map_index): ti for ti in dag_run.get_task_instances()}


def _xcom(dag_run: Any, task_id: str, map_index: int = -1) -> Any:
    ti = _tis(dag_run)[(task_id, map_index)]
    if not hasattr(ti, "xcom_pull"):  # pragma: no cover - Airflow removed the test-only helper
        pytest.skip("this Airflow's TaskInstance has no xcom_pull")
    return ti.xcom_pull(task_ids=task_id, map_indexes=map_index if map_index >= 0 else None)


def _assert_success(dag_run: Any) -> None:
    states = {f"{k[0]}[{k[1]}]": (str(ti.state), ti.try_number) for k, ti in _tis(dag_run).items()}
    assert str(dag_run.state) == "success", states
    assert states and all(state == "success" for state, _ in states.values()), states


def test_daily_report_dag_end_to_end(
    airflow_db: float, project: Path, scripted_server: Any, model_connection: Any, canary_key: str,
    require_api: Any, capfd: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    require_api("run_task")
    from runner.airflow.example_dags.daily_report import dag

    with scripted_server({"fallback": "Daily report: all quiet."}) as server:
        model_connection(server.base_url)
        dag_run = dag.test(logical_date=LOGICAL_DATE)
        requests = server.requests
    _assert_success(dag_run)
    assert len(requests) == 1
    assert "2025-06-02" in json.dumps(requests[0].body)  # inputs={"date": "{{ ds }}"} was rendered
    assert requests[0].auth_fingerprint == server.key_fingerprint(canary_key)  # the connection's key was used
    manifest = _xcom(dag_run, "daily_report")
    assert set(manifest) == {"run_id", "status", "cost_usd", "report_path", "exit_code"}
    assert manifest["status"] == "completed" and manifest["exit_code"] == 0 and manifest["cost_usd"] > 0
    assert manifest["run_id"] == derive_run_id(
        task="daily_report", dag_id=dag.dag_id, dag_run_id=dag_run.run_id, task_id="daily_report", map_index=-1,
        inputs={"date": "2025-06-02"},
    )  # fmt: skip
    assert Path(manifest["report_path"]).is_dir()
    assert canary_key not in json.dumps(manifest)
    out, err = capfd.readouterr()
    assert canary_key not in out + err


def test_retry_resumes_the_same_run_without_re_spending(
    airflow_db: float, project: Path, scripted_server: Any, model_connection: Any, require_api: Any, test_dags: Any
) -> None:
    require_api("run_task")
    retry_dag = test_dags.retry_dag

    script = {
        "fallback": "fine",
        "rules": [{"name": "polish-fails-once", "when": {"last_message": "STEP-TWO"}, "times": 1, "reply": {"fault": {"status": 400}}}],
    }  # fmt: skip
    with scripted_server(script) as server:
        model_connection(server.base_url)
        dag_run = retry_dag.test()
        requests = server.requests
    _assert_success(dag_run)
    ti = _tis(dag_run)[("two_step", -1)]
    assert ti.try_number == 2  # try 1 failed (the model fault), try 2 succeeded
    steps = [r.body["messages"][-1]["content"].split()[0] for r in requests]
    assert steps == ["STEP-ONE", "STEP-TWO", "STEP-TWO"], "try 2 must not re-pay the completed draft step"
    manifest = _xcom(dag_run, "two_step")
    assert manifest["status"] == "completed"
    assert manifest["run_id"] == derive_run_id(
        task="two_step", dag_id="runner_test_retry_resume", dag_run_id=dag_run.run_id, task_id="two_step",
        map_index=-1, inputs={"topic": "tides"},
    )  # fmt: skip


def test_mapped_operator_gives_each_map_index_its_own_run(
    airflow_db: float, project: Path, scripted_server: Any, model_connection: Any, require_api: Any, test_dags: Any
) -> None:
    require_api("run_task")
    mapped_dag = test_dags.mapped_dag

    with scripted_server({"fallback": "label: ok"}) as server:
        model_connection(server.base_url)
        dag_run = mapped_dag.test()
        requests = server.requests
    _assert_success(dag_run)
    assert len(requests) == 3
    manifests = [_xcom(dag_run, "classify", i) for i in range(3)]
    assert len({m["run_id"] for m in manifests}) == 3
    assert all(m["status"] == "completed" for m in manifests)


def _rows(path: Path, n: int) -> Path:
    path.write_text("".join(json.dumps({"text": f"ticket {i}"}) + "\n" for i in range(n)))
    return path


def test_batch_fanout_wiring_with_a_stub_batch(
    airflow_db: float, project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """split -> 3 mapped shards -> merge, with run_batch replaced by a copy (checks the Airflow wiring only)."""
    from runner.airflow import fanout
    from runner.airflow.example_dags.batch_fanout import dag

    calls: list[dict[str, Any]] = []

    def stub_batch(task: str, **kwargs: Any) -> dict[str, Any]:
        calls.append({"task": task, **kwargs})
        shutil.copyfile(kwargs["input_path"], kwargs["output_path"])
        n = len(Path(kwargs["input_path"]).read_text().splitlines())
        return {"total": n, "done": n, "failed": 0, "skipped": 0, "cost_usd": 0.001 * n,
                "output_path": str(kwargs["output_path"]), "report_path": None}  # fmt: skip

    monkeypatch.setattr(fanout, "run_batch_for_airflow", stub_batch)
    source = _rows(tmp_path / "tickets.jsonl", 7)
    dag_run = dag.test(run_conf={"task": "classify", "input_path": str(source), "num_shards": 3, "concurrency": 2})
    _assert_success(dag_run)
    assert len(calls) == 3 and {c["task"] for c in calls} == {"classify"} and {c["concurrency"] for c in calls} == {2}
    assert len({str(c["journal_path"]) for c in calls}) == 3
    summary = _xcom(dag_run, "merge")
    assert summary["total"] == summary["done"] == 7 and summary["shards"] == 3
    assert Path(summary["output_path"]).read_text() == source.read_text()
    report = json.loads(Path(summary["report_path"]).read_text())
    assert [Path(s["shard"]).name for s in report["per_shard"]] == [f"shard-0000{i}-of-00003.jsonl" for i in range(3)]


def test_batch_fanout_dag_end_to_end(
    airflow_db: float, project: Path, tmp_path: Path, scripted_server: Any, model_connection: Any, require_api: Any
) -> None:
    require_api("run_batch")
    from runner.airflow.example_dags.batch_fanout import dag

    source = _rows(tmp_path / "tickets.jsonl", 6)
    with scripted_server({"fallback": "label: billing"}) as server:
        model_connection(server.base_url)
        dag_run = dag.test(run_conf={"task": "classify", "input_path": str(source), "num_shards": 3})
        requests = server.requests
    _assert_success(dag_run)
    assert len(requests) == 6
    summary = _xcom(dag_run, "merge")
    assert summary["total"] == summary["done"] == 6 and summary["failed"] == 0 and summary["shards"] == 3
    assert len(Path(summary["output_path"]).read_text().splitlines()) == 6
    assert Path(summary["report_path"]).is_file() and Path(summary["report_path"]).with_suffix(".md").is_file()


def test_retried_shard_resumes_its_journal(
    airflow_db: float, project: Path, tmp_path: Path, scripted_server: Any, model_connection: Any,
    require_api: Any, test_dags: Any, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    require_api("run_batch")
    from runner.airflow import fanout
    from runner.airflow._compat import AirflowException

    real_batch = fanout.run_batch_for_airflow
    died: list[str] = []

    def dies_once_after_the_batch(task: str, **kwargs: Any) -> dict[str, Any]:
        manifest = real_batch(task, **kwargs)
        if Path(kwargs["input_path"]).name.startswith("shard-00001") and not died:
            died.append(str(kwargs["journal_path"]))
            raise AirflowException("simulated worker loss after the shard's batch finished")
        return manifest

    monkeypatch.setattr(fanout, "run_batch_for_airflow", dies_once_after_the_batch)
    source = _rows(tmp_path / "tickets.jsonl", 4)  # shard 0: tickets 0-1, shard 1: tickets 2-3
    with scripted_server({"fallback": "label: ok"}) as server:
        model_connection(server.base_url)
        dag_run = test_dags.fanout_retry_dag.test(run_conf={"input_path": str(source)})
        requests = server.requests
    _assert_success(dag_run)
    tries = {k: ti.try_number for k, ti in _tis(dag_run).items() if k[0] == "run_shard"}
    assert tries == {("run_shard", 0): 1, ("run_shard", 1): 2}
    assert len(died) == 1 and Path(died[0]).is_file()  # the journal the retry resumed
    assert len(requests) == 4, "the retried shard must not pay for its rows again"
    summary = _xcom(dag_run, "merge")
    assert summary["done"] == summary["total"] == 4 and summary["failed"] == 0
    assert len(Path(summary["output_path"]).read_text().splitlines()) == 4
