"""A fan-out over many rows pushes small XCom values: counts and paths, never one entry per row.

Under a real scheduler every XCom value is a row of Airflow's metadata database (sent through
its execution API), and a mapped task's output is pulled whole by the merge; ``dag.test()``
keeps them in process, where a large value goes unnoticed. These tests run the example
fan-out over :data:`ROWS` rows and measure what each task pushed.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, overload

import pytest

from tests.support.services import import_or_missing

pytestmark = [pytest.mark.airflow, pytest.mark.timeout(600), pytest.mark.filterwarnings("ignore::DeprecationWarning")]
import_or_missing("airflow", "apache-airflow is not installed (pip install 'runner[airflow]')")

ROWS = 10_000
SHARDS = 2
PER_VALUE_LIMIT = 2_048  # bytes of JSON: a manifest, whatever the number of rows
PER_SHARD_SPEC_LIMIT = 160  # bytes of JSON per element of the split's list (one per mapped shard)


def _size(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":")).encode())


def _xcoms(dag_run: Any) -> dict[tuple[str, int, str], Any]:
    """Every XCom value the run's task instances pushed, by (task, map index, key)."""
    found: dict[tuple[str, int, str], Any] = {}
    for ti in dag_run.get_task_instances():
        index = ti.map_index if ti.map_index >= 0 else None
        for key in ("return_value", "manifest"):
            value = ti.xcom_pull(task_ids=ti.task_id, key=key, map_indexes=index)
            if value is not None:
                found[(ti.task_id, ti.map_index, key)] = value
    return found


def test_a_fanout_over_ten_thousand_rows_pushes_only_small_xcom_values(
    airflow_db: float, project: Path, tmp_path: Path, scripted_server: Any, model_connection: Any, require_api: Any
) -> None:
    require_api("run_batch")
    from runner.airflow.example_dags.batch_fanout import dag

    source = tmp_path / "many.csv"  # identical inputs, own ids: deduplicated, so only one paid call per shard
    source.write_text("id,text\n" + "".join(f"R-{i:05d},same ticket\n" for i in range(1, ROWS + 1)))
    conf = {"task": "classify", "input_path": str(source), "num_shards": SHARDS, "id_column": "id", "dedupe": True}
    with scripted_server({"fallback": "label: billing"}) as server:
        model_connection(server.base_url)
        dag_run = dag.test(logical_date=None, run_conf=conf)
        calls = sum(1 for r in server.requests if r.method == "POST")
    xcoms = _xcoms(dag_run)
    merge = xcoms[("merge", -1, "return_value")]
    assert str(dag_run.state) == "success" and merge["total"] == merge["done"] == ROWS, merge
    assert calls <= SHARDS
    shards = [v for (task, _, key), v in xcoms.items() if task == "run_shard" and key == "return_value"]
    assert len(shards) == SHARDS and sum(s["done"] for s in shards) == ROWS
    sizes = {f"{task}[{index}].{key}": _size(v) for (task, index, key), v in xcoms.items()}
    assert {k: s for k, s in sizes.items() if s > PER_VALUE_LIMIT} == {}, sizes
    assert "R-00042" not in json.dumps(list(xcoms.values())), "no row's id (or data) in any XCom value"


def test_the_split_pushes_a_small_entry_per_shard_even_at_the_most_shards() -> None:
    from runner.airflow.fanout import MAX_SHARDS
    from runner.airflow.plan import plan_shards

    specs = [s.as_xcom() for s in plan_shards(ROWS * 10, "0" * 64, num_shards=MAX_SHARDS, shard_size=None)]
    assert len(specs) == MAX_SHARDS
    assert max(_size(s) for s in specs) <= PER_SHARD_SPEC_LIMIT


class _LazyResults(Sequence[Any]):
    """Answers as Airflow's ``LazyXComSequence`` does under a real scheduler: each index or
    slice asked for is one request to the API server (counted here)."""

    def __init__(self, values: list[Any]) -> None:
        self.values = values
        self.requests = 0

    def __len__(self) -> int:
        self.requests += 1
        return len(self.values)

    @overload
    def __getitem__(self, key: int) -> Any: ...

    @overload
    def __getitem__(self, key: slice) -> Sequence[Any]: ...

    def __getitem__(self, key: int | slice) -> Any:
        self.requests += 1
        return self.values[key]  # an index past the end raises IndexError, which ends an iteration


def test_the_merge_reads_every_shards_result_in_one_request() -> None:
    from runner.airflow.fanout import _items

    results = [{"index": i, "done": 1} for i in range(1_000)]
    lazy = _LazyResults(results)
    assert _items(lazy) == results
    assert lazy.requests == 1, "one slice, not one request per shard"
    assert _items(None) == [] and _items({"index": 0}) == [{"index": 0}] and _items(iter(results[:2])) == results[:2]
