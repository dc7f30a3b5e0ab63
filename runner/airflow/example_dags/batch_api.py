"""Run a runner batch as one provider batch (about half price), waiting in the triggerer.

Trigger with the batch's input as conf, for example::

    airflow dags trigger runner_batch_api \
        --conf '{"input_path": "/shared/in/tickets.csv", "id_column": "id", "max_cost_usd": 5}'

The task submits the rows as one provider batch (OpenAI's ``/v1/files`` + ``/v1/batches``,
or a compatible endpoint), records its id in the batch's journal and defers: the wait (up to
24 hours at the provider) runs in Airflow's triggerer, holding no worker slot. When the
batch has ended, a worker collects it and writes one output record per input row and the
batch report. A retry (on any worker) re-attaches to the batch already out: with the shared
store, nothing is submitted twice.

Needs: ``RUNNER_ROOT`` on the workers, an ``airflow triggerer`` running with the runner
package installed, and the ``runner_model`` connection (``conn_id``; the triggerer reads
its key from it, Airflow never stores the key with the trigger). For several workers, the
shared store (``RUNNER_STORE_CONN_ID`` naming a postgres connection, or
``RUNNER_STORE_URL``) and a shared work directory (``RUNNER_AIRFLOW_WORK_DIR``). The task
must be one agent on one goal without tools (what a provider batch can send).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from airflow.sdk import DAG, Param

from runner.airflow.batch_operator import RunnerBatchOperator

NULL_TEXT = ["null", "string"]
FORMATS = [None, "csv", "jsonl", "parquet"]

with DAG(
    dag_id="runner_batch_api",
    description="Run a runner batch as one provider batch, waiting for it in the triggerer",
    schedule=None,
    start_date=datetime(2025, 1, 1, tzinfo=UTC),
    catchup=False,
    default_args={"retries": 2, "retry_delay": timedelta(minutes=1)},
    render_template_as_native_obj=True,  # "{{ params.x }}" is the param's value (a number, null), not its text
    params={
        "task": Param(
            "triage_ticket", type="string", minLength=1, description="runner task name or tasks.d/*.yaml path"
        ),
        "input_path": Param(type="string", minLength=1, description="CSV, JSONL or Parquet file every worker reads"),
        "output_path": Param(
            None, type=NULL_TEXT, description="output (.jsonl, .csv, .parquet); default: the work dir"
        ),
        "report_dir": Param(None, type=NULL_TEXT, description="where batch_report.md/.json go; default: the work dir"),
        "id_column": Param(
            None, type=NULL_TEXT, description="column holding each row's id (default: a hash of its inputs)"
        ),
        "input_format": Param(None, type=NULL_TEXT, enum=FORMATS),
        "output_format": Param(None, type=NULL_TEXT, enum=FORMATS),
        "max_attempts": Param(
            2, type="integer", minimum=1, maximum=100, description="attempts per row per Airflow try"
        ),
        "max_cost_usd": Param(
            None, type=["null", "number"], minimum=0, description="batch cap, reserved at batch prices"
        ),
        "max_wall_seconds": Param(
            None,
            type=["null", "number"],
            exclusiveMinimum=0,
            description="from the batch's start; when reached, what is still out is cancelled",
        ),
        "batch_fallback": Param(None, type=NULL_TEXT, enum=[None, "live"], description="'live': failed rows run live"),
        "batch_poll_seconds": Param(30, type="number", exclusiveMinimum=0, description="first wait between polls"),
        "max_failed_rows": Param(0, type="integer", minimum=0, description="rows allowed to end not done"),
        "conn_id": Param("runner_model_default", type="string", description="the runner_model connection"),
    },
    tags=["runner"],
) as dag:
    RunnerBatchOperator(
        task_id="batch_api",
        task="{{ params.task }}",
        input_path="{{ params.input_path }}",
        output_path="{{ params.output_path }}",
        report_dir="{{ params.report_dir }}",
        via="batch-api",
        deferrable=True,
        batch_fallback="{{ params.batch_fallback }}",
        batch_poll_seconds="{{ params.batch_poll_seconds }}",
        max_failed_rows="{{ params.max_failed_rows }}",
        conn_id="{{ params.conn_id }}",
        options={
            "id_column": "{{ params.id_column }}",
            "input_format": "{{ params.input_format }}",
            "output_format": "{{ params.output_format }}",
            "max_attempts": "{{ params.max_attempts }}",
            "max_cost_usd": "{{ params.max_cost_usd }}",
            "max_wall_seconds": "{{ params.max_wall_seconds }}",
        },
        execution_timeout=timedelta(hours=26),  # the provider's 24-hour window, and time to collect
    )
