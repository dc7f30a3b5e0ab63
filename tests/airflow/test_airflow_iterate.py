"""Iterating with the Airflow provider, through ``dag.test()`` against the loopback model server:
a try after a success recomputes (a new run) while a retry after a failure resumes; ``options``
as one template in every operator; the report link; report and output Assets."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.support.airflow_params import params_restored

pytestmark = [pytest.mark.airflow, pytest.mark.timeout(240), pytest.mark.filterwarnings("ignore::DeprecationWarning")]
pytest.importorskip("airflow", reason="apache-airflow is not installed (pip install 'runner[airflow]')")

from runner.airflow.execution import derive_run_id  # noqa: E402

LINK_KEY = "_link_RunnerReportLink"


@pytest.fixture(autouse=True)
def _params_restored(test_dags: Any) -> Iterator[None]:
    """Each test's conf leaves these DAGs' params as they were (:func:`tests.support.airflow_params.params_restored`)."""
    from runner.airflow.example_dags import daily_report

    dags = [daily_report.dag, test_dags.templated_options_dag, test_dags.retry_dag]
    yield from params_restored(dags)


def _ti(dag_run: Any, task_id: str, map_index: int = -1) -> Any:
    return next(ti for ti in dag_run.get_task_instances() if ti.task_id == task_id and ti.map_index == map_index)


def _states(dag_run: Any) -> dict[str, str]:
    return {f"{ti.task_id}[{ti.map_index}]": str(ti.state) for ti in dag_run.get_task_instances()}


def test_a_try_after_a_success_recomputes_as_a_new_run(project: Path, scripted_server: Any, canary_key: str) -> None:
    """The adapter every task try goes through, twice for one task instance: the second try comes
    after a completed run (a clear after a success), so it is a new run, the next generation of
    the run id; a third try after that one succeeded is the generation after."""
    from runner.airflow.execution import run_task_for_airflow

    ids = {"dag_id": "d", "dag_run_id": "manual__1", "task_id": "t", "map_index": -1}
    with scripted_server({"fallback": "Report written."}) as server:
        tries = [
            run_task_for_airflow("daily_report", root=project, inputs={"date": "2024-01-02"}, model_base_url=server.base_url,
                                 api_key=canary_key, **ids)
            for _ in range(3)
        ]
        calls = len(server.requests)
    base = derive_run_id(task="daily_report", inputs={"date": "2024-01-02"}, **ids)
    assert [t["run_id"] for t in tries] == [base, f"{base}-g2", f"{base}-g3"]
    assert [t["status"] for t in tries] == ["completed"] * 3 and calls == 3, "each clear computed the report again"
    assert len({t["report_path"] for t in tries}) == 3


def test_a_retry_after_a_failure_still_resumes(
    airflow_db: float, project: Path, scripted_server: Any, model_connection: Any, test_dags: Any
) -> None:
    script = {
        "fallback": "fine",
        "rules": [{"when": {"last_message": "STEP-TWO"}, "times": 1, "reply": {"fault": {"status": 400}}}],
    }  # fmt: skip
    with scripted_server(script) as server:
        model_connection(server.base_url)
        dag_run = test_dags.retry_dag.test()
        steps = [r.body["messages"][-1]["content"].split()[0] for r in server.requests]
    ti = _ti(dag_run, "two_step")
    assert (str(ti.state), ti.try_number) == ("success", 2)
    assert steps == ["STEP-ONE", "STEP-TWO", "STEP-TWO"]  # the draft was not paid for again
    assert not ti.xcom_pull(task_ids="two_step")["run_id"].endswith("-g2")


def test_the_task_has_a_link_to_its_report(
    airflow_db: float, project: Path, scripted_server: Any, model_connection: Any
) -> None:
    from runner.airflow.example_dags.daily_report import dag

    with scripted_server({"fallback": "Daily report: all quiet."}) as server:
        model_connection(server.base_url)
        dag_run = dag.test(logical_date=datetime(2025, 6, 4, tzinfo=UTC))
    ti = _ti(dag_run, "daily_report")
    manifest = ti.xcom_pull(task_ids="daily_report")
    link = ti.xcom_pull(task_ids="daily_report", key=LINK_KEY)
    assert link == (Path(manifest["report_path"]) / "report.html").as_uri()
    assert (Path(manifest["report_path"]) / "report.html").is_file()


def test_options_as_one_template_work_in_the_batch_operator_and_the_fanout(
    airflow_db: float, project: Path, tmp_path: Path, scripted_server: Any, model_connection: Any, test_dags: Any
) -> None:
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"id": f"r{i}", "text": f"item {i}"}) + "\n" for i in range(1, 5)))
    with scripted_server({"fallback": "label: ok"}) as server:
        model_connection(server.base_url)
        dag_run = test_dags.templated_options_dag.test(run_conf={"input_path": str(rows)})
        calls = len(server.requests)
    assert str(dag_run.state) == "success", _states(dag_run)
    assert calls == 8  # four rows in the batch, four in the fan-out
    batch = _ti(dag_run, "classify_batch").xcom_pull(task_ids="classify_batch")
    ids = [json.loads(line)["id"] for line in Path(batch["output_path"]).read_text().splitlines()]
    assert sorted(ids) == ["r1", "r2", "r3", "r4"]  # id_column came from the rendered options
    merged = _ti(dag_run, "fan_merge").xcom_pull(task_ids="fan_merge")
    assert merged["done"] == 4
    link = _ti(dag_run, "classify_batch").xcom_pull(task_ids="classify_batch", key=LINK_KEY)
    assert link == Path(batch["report_path"]).as_uri()


def test_keep_columns_joins_the_input_to_the_output_of_the_batch_operator_and_the_fanout(
    airflow_db: float, project: Path, tmp_path: Path, scripted_server: Any, model_connection: Any, test_dags: Any
) -> None:
    import csv

    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"id": f"r{i}", "text": f"item {i}", "team": f"t{i}"}) + "\n" for i in range(1, 5)))
    options = {"id_column": "id", "keep_columns": "team", "output_format": "csv"}
    with scripted_server({"fallback": "label: ok"}) as server:
        model_connection(server.base_url)
        dag_run = test_dags.templated_options_dag.test(run_conf={"input_path": str(rows), "options": options})
    assert str(dag_run.state) == "success", _states(dag_run)
    for task_id in ("classify_batch", "fan_merge"):
        output = Path(_ti(dag_run, task_id).xcom_pull(task_ids=task_id)["output_path"])
        with output.open(newline="") as handle:
            records = list(csv.DictReader(handle))
        assert output.suffix == ".csv" and [(r["id"], r["input.team"]) for r in records] == [(f"r{i}", f"t{i}") for i in range(1, 5)]
        assert "input.text" not in records[0], task_id


def test_a_missing_kept_column_fails_the_fanouts_split_before_any_call(
    airflow_db: float, project: Path, tmp_path: Path, scripted_server: Any, model_connection: Any, test_dags: Any,
    capfd: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    rows = tmp_path / "rows.csv"  # a CSV header names its columns (a JSONL row may lack a column another has)
    rows.write_text("id,text\nr1,x\n")
    with scripted_server({"fallback": "label: ok"}) as server:
        model_connection(server.base_url)
        dag_run = test_dags.templated_options_dag.test(
            run_conf={"input_path": str(rows), "options": {"id_column": "id", "keep_columns": "team"}}
        )
        assert server.requests == []
    assert str(_ti(dag_run, "fan_split").state) == "failed" and str(_ti(dag_run, "classify_batch").state) == "failed"
    assert "--keep-columns: team not in rows.csv" in "".join(capfd.readouterr())


def test_a_templated_option_is_still_checked_once_rendered(
    airflow_db: float, project: Path, tmp_path: Path, scripted_server: Any, model_connection: Any, test_dags: Any,
    capfd: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"id": "r1", "text": "x"}) + "\n")
    with scripted_server({"fallback": "label: ok"}) as server:
        model_connection(server.base_url)
        dag_run = test_dags.templated_options_dag.test(run_conf={"input_path": str(rows), "options": {"id_colum": "id"}})
        assert server.requests == []
    assert str(_ti(dag_run, "classify_batch").state) == "failed"
    assert "unknown option 'id_colum'. Did you mean 'id_column'?" in "".join(capfd.readouterr())


def test_templated_options_parse_and_literal_ones_are_checked_at_parse_time() -> None:
    from runner.airflow.batch_operator import RunnerBatchOperator
    from runner.airflow.fanout import RunnerShardOperator, RunnerSplitOperator
    from runner.errors import UsageError

    RunnerSplitOperator(task_id="s", task="classify", input_path="x.csv", options="{{ params.options }}")
    RunnerShardOperator(task_id="r", task="classify", input_path="x.csv", shard={}, options="{{ params.options }}")
    RunnerBatchOperator(task_id="b", task="classify", input_path="x.csv", options="{{ params.options }}")
    with pytest.raises(UsageError, match="unknown option 'id_colum'"):
        RunnerSplitOperator(task_id="s2", task="classify", input_path="x.csv", options={"id_colum": "id"})
    with pytest.raises(UsageError, match="unknown option 'id_colum'"):
        RunnerBatchOperator(task_id="b2", task="classify", input_path="x.csv", options={"id_colum": "id"})


def test_options_rendered_as_text_are_read_as_json_or_a_literal_and_nothing_else() -> None:
    from runner.airflow.options import options_mapping
    from runner.errors import UsageError

    assert options_mapping('{"id_column": "id"}') == {"id_column": "id"}
    assert options_mapping("{'id_column': 'id', 'dedupe': True}") == {"id_column": "id", "dedupe": True}
    assert options_mapping("") == {} and options_mapping(None) == {}
    for bad in ("[1, 2]", "id_column=id", "__import__('os')"):
        with pytest.raises(UsageError, match="expected a mapping of runner batch options"):
            options_mapping(bad)


def test_report_and_output_assets_name_absolute_places(tmp_path: Path) -> None:
    from runner.airflow.assets import batch_output_asset, report_asset

    reports = report_asset("daily_report", tmp_path / "reports")
    assert reports.uri == (tmp_path / "reports").as_uri() + "/daily_report" and reports.name == "runner-reports-daily_report"
    assert batch_output_asset("s3://bucket/out/triage.jsonl").uri == "s3://bucket/out/triage.jsonl"
    with pytest.raises(ValueError, match="absolute path or a URL"):
        batch_output_asset("out/triage.jsonl")


def test_a_task_updates_its_report_asset_with_the_runs_manifest(
    airflow_db: float, project: Path, scripted_server: Any, model_connection: Any, test_dags: Any
) -> None:
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with scripted_server({"fallback": "label: ok"}) as server:
        model_connection(server.base_url)
        dag_run = test_dags.report_asset_dag.test()
    assert str(dag_run.state) == "success", _states(dag_run)
    manifest = _ti(dag_run, "classify").xcom_pull(task_ids="classify")
    with create_session() as session:
        events = session.scalars(
            select(AssetEvent).join(AssetModel, AssetEvent.asset_id == AssetModel.id)
            .where(AssetModel.uri == test_dags.CLASSIFY_REPORTS.uri, AssetEvent.source_run_id == dag_run.run_id)
        ).all()  # fmt: skip
        extras = [dict(event.extra or {}) for event in events]
    assert len(extras) == 1, extras
    assert extras[0]["run_id"] == manifest["run_id"] and extras[0]["status"] == "completed"
    assert extras[0]["report_path"] == manifest["report_path"]
