"""DAGs the deployment test adds to the example DAGs (:mod:`tests.airflow.deploy.stops`).

* ``runner_deadline``: a two-step runner task whose second model call is slower than the
  task's ``execution_timeout``; one retry.
* ``runner_killed``: the same task, no timeout, no retry: its running task instance is marked
  failed through the REST API while its second call waits, then cleared.
* ``runner_sigkilled``: the same task with one retry: its task process is killed with
  ``SIGKILL`` (no ``on_kill``: a worker lost) while its second call waits.
* ``runner_pooled_fanout``: a fan-out whose every task (split, shards, merge) is in a pool of
  one slot, with ``max_active_tis_per_dag=1``.

Each names its own ``runner_model`` connection (its own loopback server), so what each was
billed is its own.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from airflow.sdk import DAG

from runner.airflow.fanout import batch_fanout
from runner.airflow.operator import RunnerTaskOperator

POOL = "runner_one_slot"
DEADLINE_SECONDS = 40  # the retry's whole try (resume, the second call, the report) fits, on a loaded machine too
START = datetime(2025, 1, 1, tzinfo=UTC)

with DAG(dag_id="runner_deadline", schedule=None, start_date=START, catchup=False, is_paused_upon_creation=False) as deadline:
    RunnerTaskOperator(
        task_id="two_calls", task="two_calls", inputs={"tag": "DEADLINE"}, conn_id="runner_model_deadline",
        execution_timeout=timedelta(seconds=DEADLINE_SECONDS), retries=1, retry_delay=timedelta(seconds=1),
    )  # fmt: skip

with DAG(dag_id="runner_killed", schedule=None, start_date=START, catchup=False, is_paused_upon_creation=False) as killed:
    RunnerTaskOperator(task_id="two_calls", task="two_calls", inputs={"tag": "KILLED"}, conn_id="runner_model_killed")

with DAG(dag_id="runner_sigkilled", schedule=None, start_date=START, catchup=False, is_paused_upon_creation=False) as sigkilled:
    RunnerTaskOperator(
        task_id="two_calls", task="two_calls", inputs={"tag": "SIGKILLED"}, conn_id="runner_model_sigkilled",
        retries=1, retry_delay=timedelta(seconds=1),
    )  # fmt: skip

with DAG(
    dag_id="runner_pooled_fanout", schedule=None, start_date=START, catchup=False, is_paused_upon_creation=False,
    default_args={"pool": POOL, "max_active_tis_per_dag": 1, "retries": 0},
) as pooled:  # fmt: skip
    batch_fanout(task="triage_ticket", input_path="tickets_pool.csv", num_shards=3, id_column="id",
                 conn_id="runner_model_pool", concurrency=1)  # fmt: skip
