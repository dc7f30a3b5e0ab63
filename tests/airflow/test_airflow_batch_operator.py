"""RunnerBatchOperator end to end through ``dag.test()`` (which runs a deferred task's trigger in line)
against the loopback server's Batch API: defer, collect, re-attach after a lost worker, caps, refusals."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.support.airflow_params import params_restored
from tests.support.services import import_or_missing

pytestmark = [pytest.mark.airflow, pytest.mark.timeout(240), pytest.mark.filterwarnings("ignore::DeprecationWarning")]
import_or_missing("airflow", "apache-airflow is not installed (pip install 'runner[airflow]')")

from runner.airflow.batch_wait import BatchWaitEvent  # noqa: E402
from runner.model.batch_endpoints import BatchBehaviour  # noqa: E402

SCRIPT: dict[str, Any] = {"fallback": {"content": "label: ok", "usage": {"prompt_tokens": 40, "completion_tokens": 5}}}
ROWS = 4


@pytest.fixture(autouse=True)
def _params_restored(test_dags: Any) -> Iterator[None]:
    """Each test's conf leaves these DAGs' params as they were (:func:`tests.support.airflow_params.params_restored`)."""
    from runner.airflow.example_dags import batch_api

    dags = [batch_api.dag, test_dags.batch_api_dag, test_dags.batch_waiting_dag]
    yield from params_restored(dags)


def _rows(path: Path, count: int = ROWS) -> Path:
    path.write_text("".join(json.dumps({"id": f"r{i}", "text": f"item {i}"}) + "\n" for i in range(1, count + 1)))
    return path


def _ti(dag_run: Any, task_id: str) -> Any:
    return next(ti for ti in dag_run.get_task_instances() if ti.task_id == task_id)


def _output(dag_run: Any, task_id: str) -> list[dict[str, Any]]:
    """The output records, from the manifest the task returned (or pushed as ``manifest`` when it failed)."""
    ti = _ti(dag_run, task_id)
    manifest = ti.xcom_pull(task_ids=task_id) or ti.xcom_pull(task_ids=task_id, key="manifest")
    return [json.loads(line) for line in Path(manifest["output_path"]).read_text().splitlines()]


def _chat_calls(server: Any) -> int:
    return sum(1 for r in server.requests if r.path.endswith("/chat/completions"))


@pytest.fixture
def deferrals(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Every ``defer()`` the operator makes: the trigger's serialized form and the timeout."""
    from runner.airflow.batch_operator import RunnerBatchOperator

    seen: list[dict[str, Any]] = []
    real = RunnerBatchOperator.defer

    def recorded(self: Any, *, trigger: Any, method_name: str, kwargs: Any = None, timeout: Any = None) -> Any:
        seen.append({"trigger": trigger.serialize(), "method": method_name, "timeout": timeout})
        return real(self, trigger=trigger, method_name=method_name, kwargs=kwargs, timeout=timeout)

    monkeypatch.setattr(RunnerBatchOperator, "defer", recorded)
    return seen


def test_the_example_dag_defers_then_collects_every_row_from_one_provider_batch(
    airflow_db: float, project: Path, tmp_path: Path, scripted_server: Any, model_connection: Any, canary_key: str,
    deferrals: list[dict[str, Any]], capfd: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    from runner.airflow.example_dags.batch_api import dag

    source = _rows(tmp_path / "rows.jsonl")
    with scripted_server(SCRIPT, batch=BatchBehaviour(polls=4), api_key=canary_key) as server:
        model_connection(server.base_url)
        dag_run = dag.test(run_conf={"task": "classify", "input_path": str(source), "id_column": "id",
                                     "batch_poll_seconds": 0.01})  # fmt: skip
        created, chat = server.batches.batches_created, _chat_calls(server)
    assert str(dag_run.state) == "success" and _ti(dag_run, "batch_api").try_number == 1
    assert created == 1 and chat == 0, "one provider batch, no live call"
    records = _output(dag_run, "batch_api")
    assert [(r["id"], r["status"], r["output"]) for r in records] == [
        (f"r{i}", "done", "label: ok") for i in range(1, ROWS + 1)
    ]
    (deferral,) = deferrals  # out once, collected on the first resume
    classpath, kwargs = deferral["trigger"]
    assert classpath == "runner.airflow.triggers.ProviderBatchTrigger" and deferral["method"] == "execute_complete"
    assert kwargs["conn_id"] == "runner_model_default" and kwargs["api_key_env"] is None
    assert kwargs["base_url"] == server.base_url and len(kwargs["batch_ids"]) == 1
    assert canary_key not in json.dumps(kwargs), "the trigger's stored arguments never hold the key"
    assert timedelta(hours=25) < deferral["timeout"] <= timedelta(hours=26)  # the try's execution_timeout
    manifest = _ti(dag_run, "batch_api").xcom_pull(task_ids="batch_api")
    assert manifest["done"] == ROWS and manifest["exit_code"] == 0 and canary_key not in json.dumps(manifest)
    logged = "".join(capfd.readouterr())
    assert "deferring to the triggerer" in logged and canary_key not in logged


def test_a_retry_after_a_lost_worker_re_attaches_and_never_submits_again(
    airflow_db: float, project: Path, tmp_path: Path, scripted_server: Any, model_connection: Any,
    test_dags: Any, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    import shutil

    from runner.airflow import execution
    from runner.airflow._compat import AirflowException

    real_step = execution.batch_step_for_airflow
    lost: list[tuple[str, ...]] = []

    def lost_after_submitting(*args: Any, **kwargs: Any) -> Any:
        step = real_step(*args, **kwargs)
        if step.pending and not lost:
            lost.append(step.pending)
            shutil.rmtree(project / ".runner", ignore_errors=True)  # the next try runs on a worker without this disk
            raise AirflowException("simulated worker loss after the provider batch was submitted")
        return step

    monkeypatch.setattr(execution, "batch_step_for_airflow", lost_after_submitting)
    source = _rows(tmp_path / "rows.jsonl")
    with scripted_server(SCRIPT, batch=BatchBehaviour(polls=3)) as server:
        model_connection(server.base_url)
        dag_run = test_dags.batch_api_dag.test(run_conf={"input_path": str(source)})
        created, uploads = (
            server.batches.batches_created,
            [f for f in server.batches.files.values() if f.purpose == "batch"],
        )
    assert str(dag_run.state) == "success" and _ti(dag_run, "classify_batch").try_number == 2
    assert len(lost) == 1 and created == 1 and len(uploads) == 1, "the retry re-attached to the batch already out"
    assert [r["status"] for r in _output(dag_run, "classify_batch")] == ["done"] * ROWS


def test_an_expired_batch_fails_the_try_and_the_retry_resubmits_only_its_rows(
    airflow_db: float, project: Path, tmp_path: Path, scripted_server: Any, model_connection: Any,
    test_dags: Any, capfd: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    source = _rows(tmp_path / "rows.jsonl")
    with scripted_server(SCRIPT, batch=BatchBehaviour(polls=2, outcome="expired")) as server:
        model_connection(server.base_url)
        dag_run = test_dags.batch_api_dag.test(run_conf={"input_path": str(source)})
        created = server.batches.batches_created
    ti = _ti(dag_run, "classify_batch")
    assert (str(ti.state), ti.try_number) == ("failed", 2)
    # each try gives the rows max_attempts (2) real attempts, each in a batch of its own; waiting used none
    assert created == 4, "each try submitted the rows not done once per attempt"
    records = _output(dag_run, "classify_batch")
    assert [(r["status"], r["error_kind"]) for r in records] == [("failed", "batch_expired")] * ROWS
    logged = "".join(capfd.readouterr())
    assert "4 of 4 row(s) not done" in logged and "more than max_failed_rows=0" in logged


def test_with_the_live_fallback_rows_of_an_expired_batch_run_live(
    airflow_db: float, project: Path, tmp_path: Path, scripted_server: Any, model_connection: Any, test_dags: Any,
) -> None:  # fmt: skip
    source = _rows(tmp_path / "rows.jsonl")
    with scripted_server(SCRIPT, batch=BatchBehaviour(polls=2, outcome="expired")) as server:
        model_connection(server.base_url)
        dag_run = test_dags.batch_api_dag.test(run_conf={"input_path": str(source), "batch_fallback": "live"})
        created, chat = server.batches.batches_created, _chat_calls(server)
    assert str(dag_run.state) == "success" and _ti(dag_run, "classify_batch").try_number == 1
    assert created == 1 and chat == ROWS
    assert [r["status"] for r in _output(dag_run, "classify_batch")] == ["done"] * ROWS


def test_the_wall_cap_cancels_the_batch_and_fails_without_retries(
    airflow_db: float, project: Path, tmp_path: Path, scripted_server: Any, model_connection: Any,
    test_dags: Any, deferrals: list[dict[str, Any]], capfd: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    source = _rows(tmp_path / "rows.jsonl")
    with scripted_server(SCRIPT, batch=BatchBehaviour(polls=100_000)) as server:  # never ends on its own
        model_connection(server.base_url)
        dag_run = test_dags.batch_api_dag.test(run_conf={"input_path": str(source), "max_wall_seconds": 1})
        cancels = [r for r in server.requests if r.path.endswith("/cancel")]
        created = server.batches.batches_created
    ti = _ti(dag_run, "classify_batch")
    assert (str(ti.state), ti.try_number) == ("failed", 1), "a cap is not retried"
    assert created == 1 and len(cancels) == 1
    (deferral,) = deferrals
    assert deferral["trigger"][1]["cancel_reason"] == "max_wall_seconds=1" and deferral["trigger"][1]["cancel_at"]
    records = _output(dag_run, "classify_batch")
    # stopped by the batch's cap, as the engine records such rows: not run, the cap's kind (a rerun with more time goes on)
    assert [(r["status"], r["error_kind"]) for r in records] == [("not_run", "max_wall_seconds")] * ROWS
    logged = "".join(capfd.readouterr())
    assert "max_wall_seconds=1 reached" in logged


@pytest.mark.parametrize(("via", "created", "chat"), [("batch-api", 1, 0), ("live", 0, ROWS)])
def test_not_deferrable_the_worker_waits_or_runs_live(
    airflow_db: float, project: Path, tmp_path: Path, scripted_server: Any, model_connection: Any, test_dags: Any,
    deferrals: list[dict[str, Any]], via: str, created: int, chat: int,
) -> None:  # fmt: skip
    source = _rows(tmp_path / "rows.jsonl")
    with scripted_server(SCRIPT, batch=BatchBehaviour(polls=3)) as server:
        model_connection(server.base_url)
        dag_run = test_dags.batch_waiting_dag.test(run_conf={"input_path": str(source), "via": via})
        assert (server.batches.batches_created, _chat_calls(server)) == (created, chat)
    assert str(dag_run.state) == "success" and deferrals == []
    assert [r["status"] for r in _output(dag_run, "classify_batch")] == ["done"] * ROWS


@pytest.mark.parametrize(
    ("conf", "message"),
    [({"via": "live"}, "deferrable=True and batch_fallback need via='batch-api'"),
     ({"via": "carrier-pigeon"}, "via"),
     ({"batch_fallback": "retry"}, "batch_fallback"),
     ({"poll": -1}, "batch_poll_seconds")],
)  # fmt: skip
def test_bad_arguments_fail_without_retries_before_any_call(
    airflow_db: float, project: Path, tmp_path: Path, scripted_server: Any, model_connection: Any, test_dags: Any,
    capfd: pytest.CaptureFixture[str], conf: dict[str, Any], message: str,
) -> None:  # fmt: skip
    source = _rows(tmp_path / "rows.jsonl")
    with scripted_server(SCRIPT) as server:
        model_connection(server.base_url)
        dag_run = test_dags.batch_api_dag.test(run_conf={"input_path": str(source), **conf})
        requests = server.requests
    ti = _ti(dag_run, "classify_batch")
    assert (str(ti.state), ti.try_number) == ("failed", 1) and requests == []
    assert message in "".join(capfd.readouterr())


# --- no dag.test(): arguments and events ---------------------------------------------------


@pytest.mark.parametrize("name", ["rpm", "tpm"])
def test_rate_limits_are_refused_for_a_provider_batch_with_or_without_the_live_fallback(name: str) -> None:
    from runner.airflow.options import check_provider_batch_options
    from runner.errors import UsageError

    with pytest.raises(UsageError, match=rf"options\.{name}: a provider batch .* has no per-minute rate"):
        check_provider_batch_options({name: 60})
    with pytest.raises(UsageError, match=rf"options\.{name}"):
        check_provider_batch_options({name: 60, "batch_fallback": "live"})


def test_engine_options_that_apply_to_a_provider_batch_are_accepted() -> None:
    from runner.airflow.options import check_provider_batch_options

    check_provider_batch_options({"concurrency": 4, "dedupe": True, "no_cache": True, "stop_after_failures": 2})
    check_provider_batch_options({"rpm": None, "tpm": None, "max_cost_usd": 1})  # not given


@pytest.mark.parametrize("name", ["via", "batch_fallback", "batch_poll_seconds"])
def test_a_fanout_refuses_provider_batch_mode_naming_the_operator_to_use(name: str) -> None:
    from airflow.sdk import DAG

    from runner.airflow.fanout import batch_fanout
    from runner.errors import UsageError

    with (
        DAG("refused", schedule=None, start_date=datetime(2024, 1, 1, tzinfo=UTC)),
        pytest.raises(UsageError) as refused,
    ):
        batch_fanout(task="classify", input_path="in.csv", **{name: "batch-api"})
    assert f"'{name}' is not an option here" in str(refused.value) and "RunnerBatchOperator(via='batch-api'" in str(
        refused.value
    )


@pytest.mark.parametrize(
    ("kind", "retried"),
    [("auth", False), ("not_found", False), ("bad_request", False), ("no_key", False), ("unreachable", True)],
)
def test_a_trigger_error_fails_the_task_retrying_only_what_another_try_may_cure(kind: str, retried: bool) -> None:
    from runner.airflow._compat import AirflowException, AirflowFailException
    from runner.airflow.batch_operator import RunnerBatchOperator

    operator = RunnerBatchOperator(task_id="t", task="classify", input_path="in.jsonl")
    with pytest.raises(AirflowException) as raised:
        operator.execute_complete({}, BatchWaitEvent.error(kind, "the detail").as_payload())
    assert isinstance(raised.value, AirflowFailException) is not retried
    assert f"{kind}: the detail" in str(raised.value)


def test_an_event_that_is_not_the_triggers_fails_without_retries() -> None:
    from runner.airflow._compat import AirflowFailException
    from runner.airflow.batch_operator import RunnerBatchOperator

    operator = RunnerBatchOperator(task_id="t", task="classify", input_path="in.jsonl")
    with pytest.raises(AirflowFailException, match="not an event of the provider batch trigger"):
        operator.execute_complete({}, {"status": "finished"})


@pytest.mark.parametrize("own_variable", [False, True])
def test_without_a_connection_the_trigger_names_the_variable_holding_the_key(
    airflow_db: float, project: Path, tmp_path: Path, scripted_server: Any, canary_key: str, test_dags: Any,
    monkeypatch: pytest.MonkeyPatch, deferrals: list[dict[str, Any]], own_variable: bool,
) -> None:  # fmt: skip
    source = _rows(tmp_path / "rows.jsonl")
    with scripted_server(SCRIPT, batch=BatchBehaviour(polls=3), api_key=canary_key) as server:
        if own_variable:  # the agent's own endpoint and key variable
            agent = project / "agents.d/writer.yaml"
            agent.write_text(agent.read_text().replace(
                "model: {id: gpt-4o-mini, retries: 0}",
                f"model: {{id: gpt-4o-mini, retries: 0, base_url: '{server.base_url}', api_key_env: RUNNER_TEST_WRITER_KEY}}",
            ))  # fmt: skip
            monkeypatch.setenv("RUNNER_TEST_WRITER_KEY", canary_key)
        else:
            monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
            monkeypatch.setenv("OPENAI_API_KEY", canary_key)
        dag_run = test_dags.batch_api_dag.test(run_conf={"input_path": str(source)})
        created = server.batches.batches_created
    assert str(dag_run.state) == "success" and created == 1
    (deferral,) = deferrals
    kwargs = deferral["trigger"][1]
    variable = "RUNNER_TEST_WRITER_KEY" if own_variable else "OPENAI_API_KEY"
    assert (kwargs["conn_id"], kwargs["api_key_env"], kwargs["base_url"]) == (None, variable, server.base_url)
    assert canary_key not in json.dumps(kwargs)


def test_the_example_dag_is_deferrable_and_needs_an_input() -> None:
    from runner.airflow.batch_operator import RunnerBatchOperator
    from runner.airflow.example_dags.batch_api import dag

    (op,) = dag.tasks
    assert isinstance(op, RunnerBatchOperator) and op.deferrable is True and op.via == "batch-api"
    assert {"task", "input_path", "options", "conn_id", "batch_poll_seconds"} <= set(op.template_fields)
    assert op.execution_timeout == timedelta(hours=26)
    with pytest.raises(ValueError, match="input_path"):  # Airflow's ParamValidationError: a trigger without it is refused
        dag.params.validate()


def test_a_mapped_operator_runs_one_provider_batch_per_map_index(
    airflow_db: float, project: Path, scripted_server: Any, model_connection: Any, test_dags: Any,
) -> None:  # fmt: skip
    _rows(project / "rows_a.jsonl", 2)
    _rows(project / "rows_b.jsonl", 3)
    with scripted_server(SCRIPT, batch=BatchBehaviour(polls=3)) as server:
        model_connection(server.base_url)
        dag_run = test_dags.batch_api_mapped_dag.test()
        created = server.batches.batches_created
    tis = {ti.map_index: ti for ti in dag_run.get_task_instances()}
    assert str(dag_run.state) == "success" and sorted(tis) == [0, 1] and created == 2
    outputs = [ti.xcom_pull(task_ids="classify_batch", map_indexes=i)["output_path"] for i, ti in sorted(tis.items())]
    assert len(set(outputs)) == 2  # each map index its own journal and output
    assert [len(Path(p).read_text().splitlines()) for p in outputs] == [2, 3]


def test_a_task_a_provider_batch_cannot_send_fails_without_retries_before_any_call(
    airflow_db: float, project: Path, tmp_path: Path, scripted_server: Any, model_connection: Any,
    capfd: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    from runner.airflow.example_dags.batch_api import dag

    source = tmp_path / "topics.jsonl"
    source.write_text(json.dumps({"id": "t1", "topic": "tides"}) + "\n")
    agent = project / "agents.d/writer.yaml"  # the embedded model has no Batch API (a pipeline itself is sent in rounds)
    agent.write_text(agent.read_text().replace("model: {id: gpt-4o-mini, retries: 0}", "model: {id: smollm2-135m, provider: local}"))
    with scripted_server(SCRIPT) as server:
        model_connection(server.base_url)
        dag_run = dag.test(run_conf={"task": "two_step", "input_path": str(source), "id_column": "id"})
        requests = server.requests
    ti = _ti(dag_run, "batch_api")
    assert (str(ti.state), ti.try_number) == ("failed", 1) and requests == []
    assert "task 'two_step' cannot run with --via batch-api" in "".join(capfd.readouterr())


def test_a_pipeline_defers_once_per_round_and_each_round_is_one_provider_batch(
    airflow_db: float, project: Path, tmp_path: Path, scripted_server: Any, model_connection: Any,
    deferrals: list[dict[str, Any]],
) -> None:  # fmt: skip
    from runner.airflow.example_dags.batch_api import dag

    source = tmp_path / "topics.jsonl"
    source.write_text("".join(json.dumps({"id": f"t{i}", "topic": f"tides {i}"}) + "\n" for i in range(1, 4)))
    with scripted_server(SCRIPT, batch=BatchBehaviour(polls=2)) as server:
        model_connection(server.base_url)
        dag_run = dag.test(run_conf={"task": "two_step", "input_path": str(source), "id_column": "id",
                                     "batch_poll_seconds": 0.01})  # fmt: skip
        batches = sorted(server.batches.batches.values(), key=lambda b: b.id)
        steps = [{json.loads(line)["body"]["messages"][-1]["content"].split()[0] for line in
                  server.batches.files[b.input_file_id].content.decode().splitlines()} for b in batches]  # fmt: skip
    assert str(dag_run.state) == "success" and _ti(dag_run, "batch_api").try_number == 1
    assert steps == [{"STEP-ONE"}, {"STEP-TWO"}] and len(deferrals) == 2  # a round, a deferral
    assert [r["status"] for r in _output(dag_run, "batch_api")] == ["done"] * 3


def test_deferrable_defaults_to_airflows_default_deferrable(monkeypatch: pytest.MonkeyPatch) -> None:
    from runner.airflow.batch_operator import RunnerBatchOperator, _default_deferrable

    assert RunnerBatchOperator(task_id="t", task="classify", input_path="in.jsonl").deferrable is None
    monkeypatch.setenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", "True")
    assert _default_deferrable() is True


def test_a_try_after_a_success_computes_the_batch_again_as_its_next_generation(
    airflow_db: float, project: Path, tmp_path: Path, scripted_server: Any, model_connection: Any, test_dags: Any,
) -> None:  # fmt: skip
    """``dag.test()`` again for the same logical date clears the dag run's task instances, as the
    UI's Clear does: the next try of the task that succeeded computes every row again (a new
    journal, the batch's next generation), and the one after that again."""
    source, day = _rows(tmp_path / "rows.jsonl"), datetime(2025, 6, 4, tzinfo=UTC)
    calls, runs, manifests = [], [], []
    with scripted_server(SCRIPT) as server:
        model_connection(server.base_url)
        for _ in range(3):
            conf = {"input_path": str(source), "via": "live"}
            runs.append(test_dags.batch_waiting_dag.test(logical_date=day, run_after=day, run_conf=conf))
            calls.append(_chat_calls(server))
            manifests.append(_ti(runs[-1], "classify_batch").xcom_pull(task_ids="classify_batch"))
    assert [str(r.state) for r in runs] == ["success"] * 3 and len({r.run_id for r in runs}) == 1
    assert calls == [ROWS, 2 * ROWS, 3 * ROWS], "each clear after a success computed every row again"
    assert len({m["batch_id"] for m in manifests}) == 3 and len({m["output_path"] for m in manifests}) == 1
    work = Path(manifests[0]["output_path"]).parent  # the default output is in the task's work directory
    recorded = [json.loads((work / f"succeeded-g{n}.json").read_text())["batch_id"] for n in (1, 2, 3)]
    assert recorded == [m["batch_id"] for m in manifests]
    assert [r["status"] for r in _output(runs[-1], "classify_batch")] == ["done"] * ROWS

