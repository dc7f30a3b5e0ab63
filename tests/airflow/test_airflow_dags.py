"""End to end: ``dag.test()`` of the example and test DAGs against the loopback model server."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.support.airflow_params import params_restored
from tests.support.services import import_or_missing

# Airflow (and the libraries it pins) emit their own deprecation warnings inside dag.test(); the project
# turns warnings into errors, which would fail the Airflow task, so these are ignored here.
pytestmark = [pytest.mark.airflow, pytest.mark.timeout(240), pytest.mark.filterwarnings("ignore::DeprecationWarning")]
import_or_missing("airflow", "apache-airflow is not installed (pip install 'runner[airflow]')")

from runner.airflow.execution import derive_run_id  # noqa: E402

LOGICAL_DATE = datetime(2025, 6, 2, tzinfo=UTC)  # after the example DAGs' start_date


@pytest.fixture(autouse=True)
def _params_restored(test_dags: Any) -> Iterator[None]:
    """Each test's conf leaves these DAGs' params as they were (:func:`tests.support.airflow_params.params_restored`)."""
    from runner.airflow.example_dags import batch_fanout, daily_report

    dags = [batch_fanout.dag, daily_report.dag, *(v for v in vars(test_dags).values() if hasattr(v, "task_dict"))]
    yield from params_restored(dags)


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
    assert set(manifest) == {"run_id", "status", "cost_usd", "report_path", "exit_code", "error_kind", "error"}
    assert manifest["error"] is None and manifest["error_kind"] is None
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


def _state(dag_run: Any, task_id: str, map_index: int = -1) -> tuple[str, int]:
    ti = _tis(dag_run)[(task_id, map_index)]
    return str(ti.state), ti.try_number


def _prompts(requests: list[Any]) -> list[str]:
    return [r.body["messages"][-1]["content"] for r in requests if r.method == "POST"]


def test_manual_daily_report_has_no_logical_date_and_still_runs(
    airflow_db: float, project: Path, scripted_server: Any, model_connection: Any, require_api: Any
) -> None:
    """Airflow 3's ``airflow dags trigger`` makes a run without a logical date: no ``ds`` in the context."""
    require_api("run_task")
    from runner.airflow.example_dags.daily_report import dag

    with scripted_server({"fallback": "Daily report: fine."}) as server:
        model_connection(server.base_url)
        manual = dag.test(logical_date=None, run_after=datetime(2025, 6, 5, 9, 30, tzinfo=UTC))
        _assert_success(manual)  # before the next dag.test(), which clears this run's task instances
        assert manual.logical_date is None
        chosen = dag.test(logical_date=None, run_conf={"date": "2025-06-01", "max_cost_usd": 0.5})
        _assert_success(chosen)
        prompts = _prompts(server.requests)
    assert ["2025-06-05" in p for p in prompts] == [True, False] and "2025-06-01" in prompts[1]


@pytest.mark.parametrize(
    ("conf", "param"),
    [({"date": "June 1st"}, "date"), ({"max_cost_usd": "abc"}, "max_cost_usd"), ({"max_cost_usd": -1}, "max_cost_usd"),
     ({"task": ""}, "task")],
)  # fmt: skip
def test_daily_report_refuses_bad_params_at_trigger_time(airflow_db: float, conf: dict[str, Any], param: str) -> None:
    from runner.airflow.example_dags.daily_report import dag

    with pytest.raises(ValueError, match=f"Invalid input for param {param}"):  # Airflow's ParamValidationError
        dag.test(logical_date=None, run_conf=conf)


@pytest.mark.parametrize("cap", ["nan", "-1", "lots", "inf", "None"])
def test_templated_caps_that_are_not_numbers_fail_once_before_any_call(
    airflow_db: float, project: Path, scripted_server: Any, model_connection: Any, test_dags: Any, cap: str
) -> None:
    with scripted_server({"fallback": "label: ok"}) as server:
        model_connection(server.base_url)
        dag_run = test_dags.templated_caps_dag.test(run_conf={"cap": cap})
        requests = server.requests
    assert _state(dag_run, "classify") == ("failed", 1), "refused without retries (the task has retries=2)"
    assert requests == []


def test_templated_caps_rendered_as_text_are_typed(
    airflow_db: float, project: Path, scripted_server: Any, model_connection: Any, test_dags: Any, require_api: Any
) -> None:
    require_api("run_task")
    with scripted_server({"fallback": {"content": "label: ok", "usage": {"prompt_tokens": 10, "completion_tokens": 2}}}) as server:
        model_connection(server.base_url)
        dag_run = test_dags.templated_caps_dag.test(run_conf={"cap": "0.000001"})  # below one call's worst case
        requests = server.requests
    assert _state(dag_run, "classify") == ("failed", 1)  # capped: fails without retry
    manifest = _xcom_key(dag_run, "classify", "manifest")
    assert manifest["status"] == "capped" and manifest["error_kind"] == "max_cost_usd" and requests == []


def test_a_failed_runs_log_states_kind_and_message_without_the_key(
    airflow_db: float, project: Path, scripted_server: Any, model_connection: Any, test_dags: Any,
    canary_key: str, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    script = {"rules": [{"reply": {"fault": {"status": 401, "body": {"error": {"message": f"Incorrect API key provided: {canary_key}"}}}}}]}
    with scripted_server(script) as server:
        model_connection(server.base_url)
        dag_run = test_dags.templated_caps_dag.test(run_conf={"cap": "0.5"})
    state, tries = _state(dag_run, "classify")
    assert state == "failed" and tries == 3  # a failed run is retried (auth may be fixed in the connection)
    manifest = _xcom_key(dag_run, "classify", "manifest")
    assert manifest["status"] == "failed" and manifest["error_kind"] == "auth"
    assert "Incorrect API key provided" in manifest["error"] and canary_key not in manifest["error"]
    out, err = capfd.readouterr()
    logged = out + err + caplog.text
    assert "ended failed (exit 1" in logged and ": auth: model endpoint error (auth)" in logged
    assert canary_key not in logged


def _xcom_key(dag_run: Any, task_id: str, key: str, map_index: int = -1) -> Any:
    ti = _tis(dag_run)[(task_id, map_index)]
    return ti.xcom_pull(task_ids=task_id, key=key, map_indexes=map_index if map_index >= 0 else None)


def _tickets(path: Path, n: int, *, duplicate_every: int = 3) -> Path:
    """``id,text`` rows; every ``duplicate_every``-th row repeats an earlier row's text (same inputs, own id)."""
    lines = ["id,text"]
    for i in range(1, n + 1):
        text = "ticket 1" if i % duplicate_every == 0 else f"ticket {i}"
        lines.append(f"T-{i:03d},{text}")
    path.write_text("\n".join(lines) + "\n")
    return path


def _rows(path: Path, n: int) -> Path:
    path.write_text("".join(json.dumps({"text": f"ticket {i}"}) + "\n" for i in range(n)))
    return path


def _merged(summary: dict[str, Any]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in Path(summary["output_path"]).read_text().splitlines()]


def test_batch_fanout_dag_keeps_every_row_and_its_id(
    airflow_db: float, project: Path, tmp_path: Path, scripted_server: Any, model_connection: Any, require_api: Any
) -> None:
    require_api("run_batch")
    from runner.airflow.example_dags.batch_fanout import dag

    source = _tickets(tmp_path / "tickets.csv", 10)
    conf = {"task": "classify", "input_path": str(source), "num_shards": 3, "id_column": "id", "concurrency": 2}
    with scripted_server({"fallback": "label: billing"}) as server:
        model_connection(server.base_url)
        dag_run = dag.test(logical_date=None, run_conf=conf)
        requests = server.requests
    _assert_success(dag_run)
    assert len(requests) == 10  # identical inputs are separate rows when the ids differ
    summary = _xcom(dag_run, "merge")
    assert summary["total"] == summary["done"] == summary["records"] == 10 and summary["shards"] == 3
    rows = _merged(summary)
    assert [(r["row"], r["id"], r["status"]) for r in rows] == [(i, f"T-{i:03d}", "done") for i in range(1, 11)]
    report = json.loads(Path(summary["report_json"]).read_text())
    assert report["rows"] == 10 and report["counts"]["done"] == 10 and len(report["shards"]) == 3
    assert Path(summary["report_path"]).read_text().startswith(f"# Batch {summary['batch_id']}: classify")
    assert [_xcom(dag_run, "run_shard", i)["rows"] for i in range(3)] == [[1, 4], [5, 7], [8, 10]]


def test_batch_fanout_without_an_id_column_fails_on_duplicate_rows(
    airflow_db: float, project: Path, tmp_path: Path, scripted_server: Any, model_connection: Any, require_api: Any
) -> None:
    """The issue's 131-of-1,200: identical inputs share a hash id; the run must not end green."""
    require_api("run_batch")
    from runner.airflow.example_dags.batch_fanout import dag

    source = _tickets(tmp_path / "tickets.csv", 9)
    with scripted_server({"fallback": "label: ok"}) as server:
        model_connection(server.base_url)
        dag_run = dag.test(logical_date=None, run_conf={"task": "classify", "input_path": str(source), "num_shards": 2})
    assert str(dag_run.state) == "failed"
    assert _state(dag_run, "run_shard", 0)[0] == "success" and _state(dag_run, "merge") == ("failed", 1)
    summary = _xcom_key(dag_run, "merge", "manifest")
    assert summary["invalid"] == 3 and summary["done"] == 6 and summary["records"] == 9  # every row is in the output
    invalid = [r for r in _merged(summary) if r["status"] == "invalid"]
    assert [r["row"] for r in invalid] == [3, 6, 9] and all("pass --id-column" in r["error"] for r in invalid)


def test_batch_fanout_row_failure_policy(
    airflow_db: float, project: Path, tmp_path: Path, scripted_server: Any, model_connection: Any, require_api: Any
) -> None:
    require_api("run_batch")
    from runner.airflow.example_dags.batch_fanout import dag

    source = _rows(tmp_path / "tickets.jsonl", 6)
    script = {"rules": [{"when": {"last_message": "ticket 4"}, "reply": {"fault": {"status": 400}}}], "fallback": "label: ok"}
    conf = {"task": "classify", "input_path": str(source), "num_shards": 2}
    with scripted_server(script) as server:
        model_connection(server.base_url)
        strict = dag.test(logical_date=None, run_conf=conf)
        assert str(strict.state) == "failed" and _state(strict, "merge") == ("failed", 1)
        assert _state(strict, "run_shard", 1) == ("success", 1)  # bad_request is final: no shard retry pays again
        tolerant = dag.test(logical_date=None, run_conf={**conf, "max_failed_rows": 1})
        _assert_success(tolerant)
        prompts = _prompts(server.requests)
    assert sum("ticket 4" in p for p in prompts) == 2  # once per dag run: a final error is not retried
    summary = _xcom(tolerant, "merge")
    assert summary["failed"] == 1 and summary["done"] == 5
    failed = [r for r in _merged(summary) if r["status"] != "done"]
    assert [(r["row"], r["status"], r["error_kind"]) for r in failed] == [(5, "failed", "bad_request")]


@pytest.mark.parametrize(
    ("conf", "param"),
    [({}, "input_path"), ({"input_path": ""}, "input_path"), ({"input_path": "x.csv", "num_shards": "four"}, "num_shards"),
     ({"input_path": "x.csv", "num_shards": 0}, "num_shards"), ({"input_path": "x.csv", "input_format": "xlsx"}, "input_format"),
     ({"input_path": "x.csv", "max_cost_usd": -1}, "max_cost_usd"), ({"input_path": "x.csv", "map": ["subject"]}, "map")],
)  # fmt: skip
def test_batch_fanout_refuses_bad_params_at_trigger_time(airflow_db: float, conf: dict[str, Any], param: str) -> None:
    from runner.airflow.example_dags.batch_fanout import dag

    with pytest.raises(ValueError, match=f"Invalid input for param {param}"):
        dag.test(logical_date=None, run_conf=conf)


@pytest.mark.parametrize(
    ("conf", "message"),
    [
        ({"id_colum": "id"}, "unknown key 'id_colum'. Did you mean 'id_column'?"),
        ({"id_column": "ticket_id"}, "the id column 'ticket_id' is not in the file"),
        ({"input_path": "/nonexistent/tickets.csv"}, "no such input file"),
        ({"input_path": "/tmp/tickets"}, "cannot tell the format"),
        ({"output_path": "/tmp/out.xlsx"}, "cannot tell the output format"),
        ({"map": ["subject=title"]}, "the task has no input 'subject'"),
        ({"task": "no_such_task"}, "no_such_task"),
    ],
)
def test_batch_fanout_split_refuses_what_no_retry_can_fix(
    airflow_db: float, project: Path, tmp_path: Path, scripted_server: Any, model_connection: Any,
    capfd: pytest.CaptureFixture[str], conf: dict[str, Any], message: str,
) -> None:  # fmt: skip
    from runner.airflow.example_dags.batch_fanout import dag

    source = _tickets(tmp_path / "tickets.csv", 6)
    with scripted_server({"fallback": "label: ok"}) as server:
        model_connection(server.base_url)
        dag_run = dag.test(logical_date=None, run_conf={"task": "classify", "input_path": str(source), **conf})
        requests = server.requests
    assert _state(dag_run, "split") == ("failed", 1), "refused without retries"
    assert requests == []
    assert message in "".join(capfd.readouterr())


@pytest.mark.parametrize(
    ("connection", "message"),
    [(None, "store connection 'runner_store' is not defined"),
     ({"conn_type": "mysql", "host": "db", "login": "u", "password": "store-pw-1234"}, "must be a postgres connection"),
     ({"conn_type": "postgres", "login": "u", "password": "store-pw-1234"}, "has no host")],
)  # fmt: skip
def test_a_store_connection_that_cannot_be_the_store_is_refused_without_retries(
    airflow_db: float, project: Path, tmp_path: Path, scripted_server: Any, model_connection: Any,
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str], connection: dict[str, Any] | None, message: str,
) -> None:  # fmt: skip
    from runner.airflow.example_dags.batch_fanout import dag

    monkeypatch.setenv("RUNNER_STORE_CONN_ID", "runner_store")
    if connection is not None:
        monkeypatch.setenv("AIRFLOW_CONN_RUNNER_STORE", json.dumps(connection))
    source = _tickets(tmp_path / "tickets.csv", 4)
    with scripted_server({"fallback": "label: ok"}) as server:
        model_connection(server.base_url)
        dag_run = dag.test(logical_date=None, run_conf={"task": "classify", "input_path": str(source)})
        requests = server.requests
    assert _state(dag_run, "split") == ("failed", 1) and requests == []
    logged = "".join(capfd.readouterr())
    assert message in logged and "store-pw-1234" not in logged


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
        if kwargs["request"].rows == (3, 4) and not died:
            died.append(str(kwargs["request"].journal_path))
            raise AirflowException("simulated worker loss after the shard's batch finished")
        return manifest

    monkeypatch.setattr(fanout, "run_batch_for_airflow", dies_once_after_the_batch)
    source = _rows(tmp_path / "tickets.jsonl", 4)  # shard 0: rows 1-2, shard 1: rows 3-4
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
    assert [r["row"] for r in _merged(summary)] == [1, 2, 3, 4]


def test_shard_retry_re_runs_rows_whose_attempts_were_used_up(
    airflow_db: float, project: Path, tmp_path: Path, scripted_server: Any, model_connection: Any,
    require_api: Any, test_dags: Any, capfd: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    require_api("run_batch")
    source = _rows(tmp_path / "tickets.jsonl", 4)
    script = {"rules": [{"when": {"last_message": "ticket 3"}, "times": 2, "reply": {"fault": {"status": 503}}}],
              "fallback": "label: ok"}  # fmt: skip
    with scripted_server(script) as server:
        model_connection(server.base_url)
        dag_run = test_dags.fanout_attempts_dag.test(run_conf={"input_path": str(source)})
        prompts = _prompts(server.requests)
    _assert_success(dag_run)
    assert _state(dag_run, "run_shard", 1) == ("success", 3)  # one attempt per try, two faults
    assert sum("ticket 3" in p for p in prompts) == 3 and len(prompts) == 6  # rows done are never re-run
    logged = "".join(capfd.readouterr())
    assert "rows 3-4): 1 of 2 row(s) not done (failed 1, invalid 0, not run 0): server_error: 1" in logged
    assert "the retry resumes this shard and gives them up to 1 more attempt(s) each" in logged
    assert _xcom(dag_run, "merge")["done"] == 4


def test_batch_fanout_over_an_empty_input_writes_an_empty_output(
    airflow_db: float, project: Path, scripted_server: Any, model_connection: Any, require_api: Any
) -> None:
    require_api("run_batch")
    from runner.airflow.example_dags.batch_fanout import dag

    (project / "empty.csv").write_text("id,text\n")
    with scripted_server({"fallback": "label: ok"}) as server:
        model_connection(server.base_url)
        dag_run = dag.test(logical_date=None, run_conf={"task": "classify", "input_path": "empty.csv", "id_column": "id"})
        requests = server.requests
    assert str(dag_run.state) == "success" and _state(dag_run, "merge")[0] == "success"
    summary = _xcom(dag_run, "merge")
    assert summary["total"] == summary["records"] == summary["shards"] == 0 and requests == []
    assert Path(summary["output_path"]).read_text() == ""
    report = json.loads(Path(summary["report_json"]).read_text())
    assert report["rows"] == 0 and report["input"]["path"] == str(project / "empty.csv")


def test_batch_fanout_refuses_to_write_over_its_input(
    airflow_db: float, project: Path, scripted_server: Any, model_connection: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    from runner.airflow.example_dags.batch_fanout import dag

    source = _rows(project / "tickets.jsonl", 3)
    conf = {"task": "classify", "input_path": "tickets.jsonl", "output_path": str(source)}
    with scripted_server({"fallback": "label: ok"}) as server:
        model_connection(server.base_url)
        dag_run = dag.test(logical_date=None, run_conf=conf)
        requests = server.requests
    assert _state(dag_run, "split") == ("failed", 1) and requests == []
    assert "is the input file; the batch would overwrite its own input" in "".join(capfd.readouterr())
    assert len(source.read_text().splitlines()) == 3
