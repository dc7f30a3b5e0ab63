"""Fan a runner batch out over workers: split the input into row ranges, one mapped batch per range, merge.

Trigger with the options of ``runner batch`` as conf, for example::

    airflow dags trigger runner_batch_fanout \
        --conf '{"input_path": "/shared/in/tickets.csv", "id_column": "id", "num_shards": 4}'

``input_path`` is required; a missing or ill-typed param is refused when the run is
triggered, an unknown conf key (a typo) when the split task starts. Needs on the workers:
``RUNNER_ROOT``, a work directory every worker shares (``RUNNER_AIRFLOW_WORK_DIR``: a path or
a URL such as ``s3://bucket/runner-airflow``; default ``/tmp/runner-airflow``, fine for one
machine only), the runner's shared store (``RUNNER_STORE_CONN_ID`` naming a postgres
connection, or ``RUNNER_STORE_URL``) and the model connection as in ``daily_report``. Each
shard resumes from its journal when retried, on any worker; a task cleared after it succeeded
computes again (clearing only ``merge`` merges again, computing nothing); ``max_cost_usd`` and
``max_tokens`` hold across all shards. The merged output
(one record per input row, with its row number and id) and ``batch_report.json``/``.md``
are written under ``<work dir>/runner_batch_fanout/<hash of the dag run id>/fanout/``
unless ``output_path`` / ``report_dir`` say otherwise. The run fails when more than
``max_failed_rows`` rows are not done (see ``runner.airflow.fanout``).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from airflow.sdk import DAG, Param

from runner.airflow.fanout import batch_fanout
from runner.airflow.params import batch_option_params, batch_option_templates

NULL_TEXT = ["null", "string"]

with DAG(
    dag_id="runner_batch_fanout",
    description="Split a batch input into row ranges, run each as a mapped task, merge the outputs",
    schedule=None,
    start_date=datetime(2025, 1, 1, tzinfo=UTC),
    catchup=False,
    default_args={"retries": 2, "retry_delay": timedelta(seconds=30)},
    render_template_as_native_obj=True,  # "{{ params.x }}" is the param's value (a number, null, a list), not its text
    params={
        "task": Param(
            "triage_ticket", type="string", minLength=1, description="runner task name or tasks.d/*.yaml path"
        ),
        "input_path": Param(
            type="string", minLength=1, description="CSV, JSONL or Parquet file on a path every worker reads"
        ),
        "output_path": Param(
            None, type=NULL_TEXT, description="merged output (.jsonl, .csv, .parquet); default: the work dir"
        ),
        "report_dir": Param(None, type=NULL_TEXT, description="where batch_report.md/.json go; default: the work dir"),
        "num_shards": Param(4, type="integer", minimum=1, maximum=10000),
        "max_failed_rows": Param(0, type="integer", minimum=0, description="rows allowed to end not done"),
        **batch_option_params(),  # every batch option the operators take, from runner.batch.options
    },
    tags=["runner"],
) as dag:
    batch_fanout(
        task="{{ params.task }}",
        input_path="{{ params.input_path }}",
        output_path="{{ params.output_path }}",
        report_dir="{{ params.report_dir }}",
        num_shards="{{ params.num_shards }}",
        max_failed_rows="{{ params.max_failed_rows }}",
        strict_conf=True,
        **batch_option_templates(),
    )
