"""What the scheduler sees of our DAGs: their serialized form, as the dag-processor writes it.

``dag.test()`` and ``airflow dags test`` run the DAG objects the file made; a real scheduler
plans from the serialized DAG (JSON in the metadata database), while the task itself runs
from the re-parsed file. Whatever the scheduler decides with (pools, ``max_active_tis_per_dag``,
timeouts, retries, the mapped shards' partial arguments, params) must survive the round trip,
and every templated field must serialize (else the dag-processor reports an import error).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.support.services import import_or_missing

pytestmark = [pytest.mark.airflow, pytest.mark.filterwarnings("ignore::DeprecationWarning")]
import_or_missing("airflow", "apache-airflow is not installed (pip install 'runner[airflow]')")

REPO = Path(__file__).resolve().parents[2]
DAG_FILES = sorted(
    [*(REPO / "runner/airflow/example_dags").glob("[!_]*.py"), REPO / "tests/airflow/dags/runner_test_dags.py",
     REPO / "tests/airflow/deploy/dags/runner_stops.py"]
)  # fmt: skip
SCHEDULING = ("pool", "pool_slots", "max_active_tis_per_dag", "execution_timeout", "retries", "trigger_rule")


def _module(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"serialized_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _dags(path: Path) -> list[Any]:
    return [v for v in vars(_module(path)).values() if hasattr(v, "task_dict") and hasattr(v, "dag_id")]


def _round_trip(dag: Any) -> Any:
    from airflow.serialization.serialized_objects import DagSerialization

    data = DagSerialization.to_dict(dag)
    DagSerialization.validate_schema(data)
    return DagSerialization.from_dict(json.loads(json.dumps(data)))  # through JSON, as stored


def _text(value: Any) -> str:
    """A scheduling attribute as text (an enum by its value: the serialized form keeps only that)."""
    return str(getattr(value, "value", value))


def _plain(value: Any) -> Any:
    """A template field's value as the scheduler can hold it (an upstream XCom is its own reference)."""
    from airflow.sdk.definitions.xcom_arg import XComArg

    return "<xcom>" if isinstance(value, XComArg) else json.loads(json.dumps(value, sort_keys=True, default=str))


@pytest.mark.parametrize("path", DAG_FILES, ids=[p.name for p in DAG_FILES])
def test_every_dag_survives_the_schedulers_round_trip(path: Path) -> None:
    dags = _dags(path)
    assert dags, f"{path} defines no DAG"
    for dag in dags:
        back = _round_trip(dag)
        assert back.params.dump() == dag.params.dump(), dag.dag_id
        for task_id, task in dag.task_dict.items():
            seen = back.task_dict[task_id]
            for name in SCHEDULING:
                assert _text(getattr(seen, name, None)) == _text(getattr(task, name, None)), (dag.dag_id, task_id, name)
            for name in task.template_fields:
                original = getattr(task, name, None)
                if _plain(original) == "<xcom>":
                    continue
                assert _plain(getattr(seen, name, None)) == _plain(original), (dag.dag_id, task_id, name)


def test_a_fanouts_pool_and_concurrency_reach_its_mapped_shards() -> None:
    """``default_args`` (pool, max_active_tis_per_dag) hold for every task of a fan-out, the mapped shards included."""
    (pooled,) = [d for d in _dags(REPO / "tests/airflow/deploy/dags/runner_stops.py") if d.dag_id == "runner_pooled_fanout"]
    back = _round_trip(pooled)
    assert {t: (back.task_dict[t].pool, back.task_dict[t].max_active_tis_per_dag) for t in ("split", "run_shard", "merge")} == {
        t: ("runner_one_slot", 1) for t in ("split", "run_shard", "merge")
    }  # fmt: skip
