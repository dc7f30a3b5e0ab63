"""A fan-out cleared after a success computes again; clearing part of it computes only that part.

``dag.test()`` again for the same logical date clears the whole dag run (as the UI's Clear on the
run does); :func:`_clear_and_run` clears chosen task instances of a finished run (as ``airflow
tasks clear -t <task>`` does) and runs what they make runnable, the way ``dag.test()`` does.
The loopback server counts the model calls (one per row computed) and answers each computation
differently, so the merged output shows which journal each row came from.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.support.airflow_params import params_restored
from tests.support.services import import_or_missing

pytestmark = [pytest.mark.airflow, pytest.mark.timeout(240), pytest.mark.filterwarnings("ignore::DeprecationWarning")]
import_or_missing("airflow", "apache-airflow is not installed (pip install 'runner[airflow]')")

DAY = datetime(2025, 6, 3, tzinfo=UTC)
ROWS = 6  # three shards of two rows
SCRIPT = {"rules": [{"times": ROWS, "reply": "first"}, {"times": ROWS, "reply": "second"}], "fallback": "third"}


@pytest.fixture(autouse=True)
def _params_restored() -> Iterator[None]:
    from runner.airflow.example_dags import batch_fanout

    yield from params_restored([batch_fanout.dag])


def _tickets(path: Path) -> Path:
    path.write_text("id,text\n" + "".join(f"T-{i},ticket {i}\n" for i in range(1, ROWS + 1)))
    return path


def _calls(server: Any) -> int:
    return sum(1 for r in server.requests if r.method == "POST")


def _tis(dag_run: Any) -> dict[tuple[str, int], Any]:
    return {(ti.task_id, ti.map_index): ti for ti in dag_run.get_task_instances()}


def _xcom(dag_run: Any, task_id: str, map_index: int = -1) -> Any:
    ti = _tis(dag_run)[(task_id, map_index)]
    return ti.xcom_pull(task_ids=task_id, map_indexes=map_index if map_index >= 0 else None)


def _succeeded(dag_run: Any) -> dict[str, str]:
    states = {f"{k[0]}[{k[1]}]": str(ti.state) for k, ti in _tis(dag_run).items()}
    assert str(dag_run.state) == "success" and set(states.values()) == {"success"}, (dag_run.state, states)
    return states


def _merged_generations(dag_run: Any) -> list[int]:
    """The generation of each shard the merge merged (its batch report's shard entries)."""
    report = json.loads(Path(_xcom(dag_run, "merge")["report_json"]).read_text())
    return [entry.get("generation", 1) for entry in report["shards"]]  # 1: written before generations


def _answers(dag_run: Any) -> list[tuple[str, str, Any]]:
    """``(id, status, answer)`` of each merged output record."""
    lines = Path(_xcom(dag_run, "merge")["output_path"]).read_text().splitlines()
    return [(r["id"], r["status"], r["output"]) for r in map(json.loads, lines)]


def _clear_and_run(dag: Any, dag_run: Any, cleared: set[tuple[str, int]]) -> Any:
    """Clear the task instances ``cleared`` of the finished ``dag_run`` and run them (and only
    what they make runnable) as ``dag.test()`` does; the dag run, reloaded."""
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import clear_task_instances
    from airflow.sdk.definitions.dag import _run_task
    from airflow.serialization.serialized_objects import DagSerialization
    from airflow.utils.session import create_session
    from airflow.utils.state import DagRunState, TaskInstanceState
    from sqlalchemy import select

    with create_session() as session:
        run = session.scalar(select(DagRun).where(DagRun.dag_id == dag.dag_id, DagRun.run_id == dag_run.run_id))
        tis = [ti for ti in run.get_task_instances(session=session) if (ti.task_id, ti.map_index) in cleared]
        assert len(tis) == len(cleared), cleared
        clear_task_instances(tis, session, dag_run_state=DagRunState.RUNNING)
    with create_session() as session:
        run = session.scalar(select(DagRun).where(DagRun.dag_id == dag.dag_id, DagRun.run_id == dag_run.run_id))
        run.dag = DagSerialization.deserialize_dag(DagSerialization.serialize_dag(dag))
        while run.state == DagRunState.RUNNING:
            session.expire_all()
            schedulable, _ = run.update_state(session=session)
            for ti in schedulable:
                ti.try_number += 1
                ti.state = TaskInstanceState.SCHEDULED
            session.commit()
            for ti in [t for t in run.get_task_instances(session=session) if t.state == TaskInstanceState.SCHEDULED]:
                _run_task(ti=ti, task=dag.task_dict[ti.task_id])
        return run


def test_a_cleared_fanout_computes_again_and_a_partial_clear_only_what_it_cleared(
    airflow_db: float, project: Path, tmp_path: Path, scripted_server: Any, model_connection: Any, require_api: Any
) -> None:
    require_api("run_batch")
    from runner.airflow.example_dags.batch_fanout import dag

    conf = {"task": "classify", "input_path": str(_tickets(tmp_path / "tickets.csv")), "num_shards": 3,
            "id_column": "id", "max_cost_usd": 1}  # fmt: skip
    with scripted_server(SCRIPT) as server:
        model_connection(server.base_url)
        first = dag.test(logical_date=DAY, run_after=DAY, run_conf=conf)
        _succeeded(first)
        assert _calls(server) == ROWS and _merged_generations(first) == [1, 1, 1]
        assert _answers(first) == [(f"T-{i}", "done", "first") for i in range(1, ROWS + 1)]

        again = dag.test(logical_date=DAY, run_after=DAY, run_conf=conf)  # the whole dag run cleared
        _succeeded(again)
        assert again.run_id == first.run_id
        assert _calls(server) == 2 * ROWS, "clearing a successful fan-out computes every shard again"
        merged = _xcom(again, "merge")
        assert merged["done"] == ROWS and _merged_generations(again) == [2, 2, 2]
        assert merged["batch_id"].endswith("-g2")  # the split's second computation: fresh shared caps
        report = json.loads(Path(merged["report_json"]).read_text())
        assert report["ledger"]["spent"]["model_calls"] == ROWS  # this computation's calls, not both
        assert _answers(again) == [(f"T-{i}", "done", "second") for i in range(1, ROWS + 1)]

        merge_only = _clear_and_run(dag, again, {("merge", -1)})
        _succeeded(merge_only)
        assert _calls(server) == 2 * ROWS, "merging again computes nothing"
        assert _merged_generations(merge_only) == [2, 2, 2] and _answers(merge_only) == _answers(again)

        one_shard = _clear_and_run(dag, merge_only, {("run_shard", 1), ("merge", -1)})
        _succeeded(one_shard)
        assert _calls(server) == 2 * ROWS + 2, "only the cleared shard's two rows are computed again"
        assert _xcom(one_shard, "run_shard", 1)["generation"] == 3
        assert _merged_generations(one_shard) == [2, 3, 2]
        answers = ["second", "second", "third", "third", "second", "second"]
        assert _answers(one_shard) == [(f"T-{i}", "done", answers[i - 1]) for i in range(1, ROWS + 1)]
