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
shard resumes from its journal when retried, on any worker; ``max_cost_usd`` and
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

NULL_TEXT = ["null", "string"]
FORMATS = [None, "csv", "jsonl", "parquet"]

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
        "id_column": Param(
            None, type=NULL_TEXT, description="column holding each row's id (default: a hash of its inputs)"
        ),
        "map": Param([], type="array", items={"type": "string", "pattern": "^[^=]+=.+$"}, description="INPUT=COLUMN"),
        "input_format": Param(None, type=NULL_TEXT, enum=FORMATS),
        "output_format": Param(None, type=NULL_TEXT, enum=FORMATS),
        "concurrency": Param(8, type="integer", minimum=1, maximum=1024, description="rows in flight within one shard"),
        "max_attempts": Param(
            2, type="integer", minimum=1, maximum=100, description="attempts per row per Airflow try"
        ),
        "stop_after_failures": Param(None, type=["null", "integer"], minimum=1, description="per shard"),
        "max_cost_usd": Param(
            None, type=["null", "number"], minimum=0, description="batch cap, shared among the shards"
        ),
        "max_tokens": Param(
            None, type=["null", "integer"], minimum=1, description="batch cap, shared among the shards"
        ),
        "max_wall_seconds": Param(None, type=["null", "number"], exclusiveMinimum=0, description="per shard try"),
        "row_max_cost_usd": Param(None, type=["null", "number"], minimum=0),
        "row_max_steps": Param(None, type=["null", "integer"], minimum=1),
        "rpm": Param(
            None, type=["null", "number"], exclusiveMinimum=0, description="requests/minute, shared among the shards"
        ),
        "tpm": Param(
            None, type=["null", "number"], exclusiveMinimum=0, description="tokens/minute, shared among the shards"
        ),
        "durable": Param(False, type="boolean"),
        "model": Param(None, type=NULL_TEXT, description="use this model id for every agent"),
        "no_cache": Param(False, type="boolean", description="neither read nor write the result cache"),
        "dedupe": Param(False, type="boolean", description="rows with identical inputs run once (within a shard)"),
        "max_failed_rows": Param(0, type="integer", minimum=0, description="rows allowed to end not done"),
        "keep_answers": Param(False, type="boolean", description="a changed configuration keeps the earlier answers (else refused)"),
        "retry_failed": Param(False, type="boolean", description="run failed rows whose attempts are used up once more"),
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
        id_column="{{ params.id_column }}",
        map="{{ params.map }}",
        input_format="{{ params.input_format }}",
        output_format="{{ params.output_format }}",
        concurrency="{{ params.concurrency }}",
        max_attempts="{{ params.max_attempts }}",
        stop_after_failures="{{ params.stop_after_failures }}",
        max_cost_usd="{{ params.max_cost_usd }}",
        max_tokens="{{ params.max_tokens }}",
        max_wall_seconds="{{ params.max_wall_seconds }}",
        row_max_cost_usd="{{ params.row_max_cost_usd }}",
        row_max_steps="{{ params.row_max_steps }}",
        rpm="{{ params.rpm }}",
        tpm="{{ params.tpm }}",
        durable="{{ params.durable }}",
        keep_answers="{{ params.keep_answers }}",
        retry_failed="{{ params.retry_failed }}",
        model="{{ params.model }}",
        no_cache="{{ params.no_cache }}",
        dedupe="{{ params.dedupe }}",
    )
