"""Fan a runner batch out over workers: split the input into shards, one mapped batch per shard, merge.

Trigger with a conf such as ``{"task": "triage_ticket", "input_path": "/shared/in/tickets.csv", "num_shards": 4}``.
Needs on the workers: ``RUNNER_ROOT``, a work directory every worker shares
(``RUNNER_AIRFLOW_WORK_DIR``, default ``/tmp/runner-airflow``: fine for one machine only) and
the model connection as in ``daily_report``. Each shard resumes from its journal when retried.
The merged output and ``batch_report.json``/``.md`` are written under
``<work dir>/runner_batch_fanout/<hash of the dag run id>/``.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from airflow.sdk import DAG, Param

from runner.airflow.fanout import batch_fanout

with DAG(
    dag_id="runner_batch_fanout",
    description="Split a batch input into shards, run each shard as a mapped task, merge the outputs",
    schedule=None,
    start_date=datetime(2025, 1, 1, tzinfo=UTC),
    catchup=False,
    default_args={"retries": 2, "retry_delay": timedelta(seconds=30)},
    params={
        "task": Param("triage_ticket", type="string", description="runner task name or tasks.d/*.yaml path"),
        "input_path": Param("", type="string", description="CSV, JSONL or Parquet file on a shared path"),
        "num_shards": Param(4, type="integer", minimum=1),
        "concurrency": Param(4, type="integer", minimum=1, description="concurrent rows within one shard"),
    },
    tags=["runner"],
) as dag:
    batch_fanout(
        task="{{ params.task }}",
        input_path="{{ params.input_path }}",
        num_shards="{{ params.num_shards }}",
        concurrency="{{ params.concurrency }}",
    )
