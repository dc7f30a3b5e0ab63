"""Provider metadata, the connection hook, the operators and the DAG files (no dag.test here)."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.airflow, pytest.mark.filterwarnings("ignore::DeprecationWarning")]
pytest.importorskip("airflow", reason="apache-airflow is not installed (pip install 'runner[airflow]')")

from runner.airflow.provider import get_provider_info  # noqa: E402

EXAMPLE_MODULES = ("runner.airflow.example_dags.daily_report", "runner.airflow.example_dags.batch_fanout")


def test_provider_info_matches_airflows_runtime_schema() -> None:
    import airflow
    import jsonschema

    schema = json.loads((Path(airflow.__file__).parent / "provider_info.schema.json").read_text())
    info = get_provider_info()
    jsonschema.validate(info, schema)
    assert info["package-name"] == "runner"
    (conn_type,) = info["connection-types"]
    assert conn_type["connection-type"] == "runner_model"
    hook_module, hook_class = conn_type["hook-class-name"].rsplit(".", 1)
    hook = getattr(importlib.import_module(hook_module), hook_class)
    assert hook.conn_type == "runner_model" and hook.default_conn_name == "runner_model_default"
    for entry in info["operators"] + info["hooks"]:
        for module in entry["python-modules"]:
            importlib.import_module(module)


def test_hook_reads_base_url_and_key_and_masks_the_key(
    monkeypatch: pytest.MonkeyPatch, model_connection: Any, canary_key: str
) -> None:
    from runner.airflow import hook as hook_module

    masked: list[Any] = []
    monkeypatch.setattr(hook_module, "mask_secret", lambda value, name=None: masked.append(value))
    model_connection("http://127.0.0.1:8123/v1/")
    base_url, key = hook_module.RunnerModelHook().get_conn()
    assert (base_url, key) == ("http://127.0.0.1:8123/v1", canary_key)
    assert masked == [canary_key]


def test_hook_builds_base_url_from_uri_parts(monkeypatch: pytest.MonkeyPatch) -> None:
    from runner.airflow.hook import RunnerModelHook, base_url_from_parts

    monkeypatch.setenv("AIRFLOW_CONN_LOCAL_MODEL", "runner-model://:sk-x@127.0.0.1:8000/v1?scheme=http")
    assert RunnerModelHook(runner_model_conn_id="local_model").get_conn() == ("http://127.0.0.1:8000/v1", "sk-x")
    assert base_url_from_parts("api.example.com", None, None) == "https://api.example.com"
    assert base_url_from_parts(None, 1, "v1") is None


def test_missing_default_connection_falls_back_but_named_one_fails() -> None:
    from runner.airflow._compat import AirflowNotFoundException
    from runner.airflow.operator import model_credentials

    assert model_credentials(None) == (None, None)
    assert model_credentials("runner_model_default") == (None, None)
    with pytest.raises(AirflowNotFoundException):
        model_credentials("no_such_connection")


def test_status_policy() -> None:
    from runner.airflow._compat import AirflowException, AirflowFailException
    from runner.airflow.operator import check_status

    manifest = {"run_id": "r", "status": "completed", "exit_code": 0, "cost_usd": 0.0, "report_path": None}
    check_status(manifest, ("capped",))
    with pytest.raises(AirflowFailException):
        check_status({**manifest, "status": "capped", "exit_code": 3}, ("capped",))
    with pytest.raises(AirflowException, match="resumes the same run") as failed:
        check_status({**manifest, "status": "failed", "exit_code": 1}, ("capped",))
    assert not isinstance(failed.value, AirflowFailException)


@pytest.mark.parametrize("module_name", EXAMPLE_MODULES)
def test_example_dag_modules_import_and_define_dags(module_name: str) -> None:
    from airflow.sdk import DAG

    module = importlib.import_module(module_name)
    dag = module.dag
    assert isinstance(dag, DAG)
    dag.validate()
    assert dag.dag_id.startswith("runner_") and "runner" in dag.tags


def test_daily_report_dag_shape() -> None:
    from runner.airflow.example_dags.daily_report import dag
    from runner.airflow.operator import RunnerTaskOperator

    (op,) = dag.tasks
    assert isinstance(op, RunnerTaskOperator)
    assert op.inputs == {"date": "{{ ds }}"} and op.retries == 2
    assert {"task", "inputs", "caps"} <= set(op.template_fields)
    assert dag.schedule == "@daily"


def test_batch_fanout_dag_shape() -> None:
    from runner.airflow.example_dags.batch_fanout import dag

    assert {t.task_id for t in dag.tasks} == {"split", "run_shard", "merge"}
    assert dag.get_task("run_shard").upstream_task_ids == {"split"}
    assert dag.get_task("merge").upstream_task_ids == {"run_shard"}


def test_dag_folder_parses_without_import_errors() -> None:
    """The Airflow 3 DagBag over the shipped example DAGs and the test DAGs."""
    try:
        from airflow.dag_processing.dagbag import DagBag
    except ImportError:  # Airflow 3.1
        from airflow.models.dagbag import DagBag

    for folder in (
        Path(importlib.import_module("runner.airflow").__file__).parent / "example_dags",
        Path(__file__).parent / "dags",
    ):  # type: ignore[arg-type]
        bag = DagBag(dag_folder=str(folder))
        assert bag.import_errors == {}, bag.import_errors
        assert bag.dag_ids
