"""DAGs used only by tests/airflow (parsed by dag.test() from the runner-test-dags bundle)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from airflow.sdk import DAG

from runner.airflow.fanout import batch_fanout
from runner.airflow.operator import RunnerTaskOperator

with DAG(
    dag_id="runner_test_retry_resume",
    schedule=None,
    start_date=datetime(2024, 1, 1, tzinfo=UTC),
    catchup=False,
    params={"topic": "tides"},
) as retry_dag:
    # two_step: step "draft" then step "polish". The test's model server fails the first
    # "polish" call, so try 1 ends `failed`; try 2 must resume the same run (same run id)
    # and pay only for "polish" again, not for "draft".
    RunnerTaskOperator(
        task_id="two_step",
        task="two_step",
        inputs={"topic": "{{ params.topic }}"},
        retries=1,
        retry_delay=timedelta(seconds=0),
    )

with DAG(
    dag_id="runner_test_mapped",
    schedule=None,
    start_date=datetime(2024, 1, 1, tzinfo=UTC),
    catchup=False,
) as mapped_dag:
    # Dynamic task mapping over inputs: one runner run per map index, each with its own run id.
    RunnerTaskOperator.partial(task_id="classify", task="classify").expand(
        inputs=[{"text": "alpha"}, {"text": "beta"}, {"text": "gamma"}]
    )

with DAG(
    dag_id="runner_test_fanout_retry",
    schedule=None,
    start_date=datetime(2024, 1, 1, tzinfo=UTC),
    catchup=False,
    params={"input_path": ""},
    default_args={"retry_delay": timedelta(seconds=0)},
) as fanout_retry_dag:
    # The test makes shard 1's first try die right after its batch finished (a lost worker);
    # the retry must resume the shard's journal and pay for no row again.
    batch_fanout(task="classify", input_path="{{ params.input_path }}", num_shards=2, concurrency=1, retries=1)
