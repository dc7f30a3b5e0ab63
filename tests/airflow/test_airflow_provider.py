"""Provider metadata, the connection hook, the operators and the DAG files (no dag.test here)."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.services import import_or_missing
from tests.support.serving import serving

pytestmark = [pytest.mark.airflow, pytest.mark.filterwarnings("ignore::DeprecationWarning")]
import_or_missing("airflow", "apache-airflow is not installed (pip install 'runner[airflow]')")

from runner.airflow.provider import get_provider_info  # noqa: E402

EXAMPLE_MODULES = (
    "runner.airflow.example_dags.daily_report", "runner.airflow.example_dags.batch_fanout",
    "runner.airflow.example_dags.batch_api",
)  # fmt: skip


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


@pytest.mark.parametrize(
    ("status", "kind", "error"),
    [
        ("failed", "rate_limited", "model endpoint error (rate_limited): HTTP 429"),
        ("capped", "max_cost_usd", "run cap max_cost_usd=0.01 reached (cost_usd=0.012)"),
        ("stuck", "stuck", "the agent repeated the same tool call 3 times"),
        ("failed", None, None),
    ],
)
def test_a_failed_runs_message_states_status_kind_and_error(status: str, kind: str | None, error: str | None) -> None:
    from runner.airflow._compat import AirflowException
    from runner.airflow.operator import check_status

    manifest = {"run_id": "r-1", "status": status, "exit_code": 1, "cost_usd": 0.0012, "report_path": "/r",
                "error_kind": kind, "error": error}  # fmt: skip
    with pytest.raises(AirflowException) as failed:
        check_status(manifest, ("capped", "stuck"))
    message = str(failed.value)
    assert message.startswith(f"runner run r-1 ended {status} (exit 1, 0.001200 USD): {kind or status}: ")
    assert (error or "(no error message recorded)") in message and "report: /r" in message


def test_bad_templated_values_fail_without_retry_and_name_the_field() -> None:
    from runner.airflow._compat import AirflowFailException
    from runner.airflow.operator import fail_without_retry
    from runner.config.typed_values import typed_caps
    from runner.errors import ModelError

    refused = pytest.raises(AirflowFailException, match=r"runner task 'x': caps.max_cost_usd: 'nan' is not a finite")
    with refused, fail_without_retry("runner task 'x'"):
        typed_caps({"max_cost_usd": "nan"}, "caps")
    with pytest.raises(ModelError), fail_without_retry("runner task 'x'"):  # a retry may fix it: Airflow retries
        raise ModelError("timeout", "no answer")


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
    assert "ds" not in op.inputs["date"] and "dag_run.run_after" in op.inputs["date"]  # manual runs: no logical date
    assert op.retries == 2 and op.caps == {"max_cost_usd": "{{ params.max_cost_usd }}"}
    assert {"task", "inputs", "caps"} <= set(op.template_fields)
    assert dag.schedule == "@daily"
    assert dag.params.validate()["date"] is None  # a scheduled run needs no conf


def test_batch_fanout_dag_shape() -> None:
    from runner.airflow.example_dags.batch_fanout import dag
    from runner.airflow.options import OPTION_NAMES

    assert {t.task_id for t in dag.tasks} == {"split", "run_shard", "merge"}
    assert dag.get_task("run_shard").upstream_task_ids == {"split"}
    assert dag.get_task("merge").upstream_task_ids == {"run_shard", "split"}
    assert set(OPTION_NAMES) <= set(dag.params), set(OPTION_NAMES) - set(dag.params)  # every batch option is a param
    assert set(dag.get_task("split").options) == set(OPTION_NAMES)
    with pytest.raises(ValueError, match="input_path"):  # Airflow's ParamValidationError  # required: a trigger without it is refused
        dag.params.validate()


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


def test_connection_test_lists_models_on_a_live_endpoint(
    model_connection: Any, scripted_server: Any, canary_key: str
) -> None:
    from runner.airflow.hook import RunnerModelHook

    with scripted_server({"models": ["m1", "m2"]}) as server:
        model_connection(server.base_url)
        ok, message = RunnerModelHook().test_connection()
        requests = server.requests
    assert ok, message
    assert message == f"GET {server.base_url}/models: HTTP 200, 2 model(s) listed; API key sent"
    assert [(r.method, r.path) for r in requests] == [("GET", "/v1/models")]
    assert requests[0].auth_fingerprint == server.key_fingerprint(canary_key)
    assert canary_key not in message


def test_connection_test_fails_for_a_closed_port(model_connection: Any, canary_key: str) -> None:
    import socket

    from runner.airflow.hook import RunnerModelHook

    with socket.socket() as probe:  # a port nothing listens on: bound, then closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    model_connection(f"http://127.0.0.1:{port}/v1")
    ok, message = RunnerModelHook().test_connection()
    assert not ok
    assert message.startswith(f"GET http://127.0.0.1:{port}/v1/models: cannot connect (ConnectError")
    assert canary_key not in message


@pytest.mark.parametrize(
    ("status", "body", "path", "key", "expected"),
    [
        (401, b"{}", "/v1", "sk-x", "HTTP 401: the endpoint refused the API key"),
        (401, b"{}", "/v1", None, "HTTP 401: the endpoint wants an API key (set the password)"),
        (404, b"not found", "", "sk-x", "HTTP 404: no model list here; check the base URL (it usually ends in /v1)"),
        (503, b"busy", "/v1", "sk-x", "HTTP 503"),
        (200, b"<html>hello</html>", "/v1", "sk-x", "HTTP 200, but the answer is not an OpenAI-compatible model list"),
    ],
)
def test_connection_test_tells_endpoint_faults_apart(
    status: int, body: bytes, path: str, key: str | None, expected: str
) -> None:
    """A plain HTTP server answering every GET with ``status`` (the scripted server always lists models)."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from runner.airflow.probe import probe_models

    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.path)
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    with serving(ThreadingHTTPServer(("127.0.0.1", 0), Handler)) as server:
        ok, message = probe_models(f"http://127.0.0.1:{server.server_address[1]}{path}", key)
    assert not ok and message.endswith(expected), message
    assert seen == [f"{path}/models"]


def test_connection_test_refuses_non_http_urls() -> None:
    from runner.airflow.probe import probe_models

    assert probe_models("file:///etc", "sk-x") == (False, "file:///etc: the base URL must start with http:// or https://")


def test_batch_fanout_refuses_a_misspelt_option_when_the_dag_is_parsed() -> None:
    from airflow.sdk import DAG

    from runner.airflow.fanout import batch_fanout
    from runner.errors import UsageError

    with DAG("runner_typo", schedule=None), pytest.raises(UsageError, match=r"unknown option 'id_colum'\. Did you mean"):
        batch_fanout(task="t", input_path="in.csv", id_colum="id")


def test_rendered_inputs_and_connection_ids() -> None:
    from runner.airflow.operator import _inputs, model_credentials
    from runner.errors import UsageError

    assert _inputs({"date": "2025-06-02"}) == {"date": "2025-06-02"}
    assert _inputs('{"date": "2025-06-02", "n": 3}') == {"date": "2025-06-02", "n": 3}  # "{{ params.x | tojson }}"
    assert _inputs(None) == {}
    for bad in ("date=2025-06-02", "[1, 2]", 7, "None"):
        with pytest.raises(UsageError, match="inputs: "):
            _inputs(bad)
    assert model_credentials(None) == model_credentials("") == (None, None)
