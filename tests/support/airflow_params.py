"""DAG params kept as they were across ``dag.test()`` runs (shared by the Airflow test modules)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


def params_restored(dags: list[Any]) -> Iterator[None]:
    """Restore ``dags``' params (and their tasks') after a test: dag.test() runs tasks in this
    process, and Airflow's ParamsDict.update shares Param objects, so one run's conf would stay in
    the DAG's params for the next test. A test module's autouse fixture yields from it."""
    import copy

    saved = [(dag, copy.deepcopy(dag.params), {t.task_id: copy.deepcopy(t.params) for t in dag.tasks}) for dag in dags]
    yield
    for dag, params, task_params in saved:
        dag.params = params
        for task in dag.tasks:
            task.params = task_params[task.task_id]
