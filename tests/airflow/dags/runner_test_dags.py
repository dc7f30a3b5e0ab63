"""DAGs used only by tests/airflow (parsed by dag.test() from the runner-test-dags bundle)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from airflow.sdk import DAG

from runner.airflow.assets import report_asset
from runner.airflow.batch_operator import RunnerBatchOperator
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

with DAG(
    dag_id="runner_test_fanout_attempts",
    schedule=None,
    start_date=datetime(2024, 1, 1, tzinfo=UTC),
    catchup=False,
    params={"input_path": ""},
    default_args={"retry_delay": timedelta(seconds=0)},
) as fanout_attempts_dag:
    # One attempt per row per try: a row whose attempt failed with a retryable fault fails the
    # shard's try; the retry gives it another attempt (and re-runs no finished row).
    batch_fanout(task="classify", input_path="{{ params.input_path }}", num_shards=2, concurrency=1, retries=2,
                 max_attempts=1)  # fmt: skip

with DAG(
    dag_id="runner_test_templated_caps",
    schedule=None,
    start_date=datetime(2024, 1, 1, tzinfo=UTC),
    catchup=False,
    params={"cap": "0.5"},  # deliberately a plain, unvalidated param: the operator must type it
    default_args={"retries": 2, "retry_delay": timedelta(seconds=0)},
) as templated_caps_dag:
    RunnerTaskOperator(task_id="classify", task="classify", inputs={"text": "x"}, caps={"max_cost_usd": "{{ params.cap }}"})

BATCH_API_PARAMS = {"input_path": "", "via": "batch-api", "batch_fallback": None, "max_wall_seconds": None, "poll": 0.01}

with DAG(
    dag_id="runner_test_batch_api",
    schedule=None,
    start_date=datetime(2024, 1, 1, tzinfo=UTC),
    catchup=False,
    params=BATCH_API_PARAMS,
    render_template_as_native_obj=True,
    default_args={"retries": 1, "retry_delay": timedelta(seconds=0)},
) as batch_api_dag:
    # A provider batch the task defers on (dag.test() runs the trigger in line).
    RunnerBatchOperator(
        task_id="classify_batch", task="classify", input_path="{{ params.input_path }}", via="{{ params.via }}",
        deferrable=True, batch_fallback="{{ params.batch_fallback }}", batch_poll_seconds="{{ params.poll }}",
        options={"id_column": "id", "max_wall_seconds": "{{ params.max_wall_seconds }}"},
        execution_timeout=timedelta(hours=1),
    )  # fmt: skip

with DAG(
    dag_id="runner_test_batch_waiting",
    schedule=None,
    start_date=datetime(2024, 1, 1, tzinfo=UTC),
    catchup=False,
    params=BATCH_API_PARAMS,
    render_template_as_native_obj=True,
) as batch_waiting_dag:
    # The same batch, not deferrable: the worker waits (via="batch-api") or runs it live (via="live").
    RunnerBatchOperator(
        task_id="classify_batch", task="classify", input_path="{{ params.input_path }}", via="{{ params.via }}",
        deferrable=False, batch_poll_seconds="{{ params.poll }}", options={"id_column": "id"},
    )  # fmt: skip

with DAG(
    dag_id="runner_test_batch_api_mapped",
    schedule=None,
    start_date=datetime(2024, 1, 1, tzinfo=UTC),
    catchup=False,
) as batch_api_mapped_dag:
    # One provider batch per map index, each with its own journal (inputs relative to $RUNNER_ROOT).
    RunnerBatchOperator.partial(
        task_id="classify_batch", task="classify", via="batch-api", deferrable=True, batch_poll_seconds=0.01,
        options={"id_column": "id"},
    ).expand(input_path=["rows_a.jsonl", "rows_b.jsonl"])  # fmt: skip

with DAG(
    dag_id="runner_test_templated_options",
    schedule=None,
    start_date=datetime(2024, 1, 1, tzinfo=UTC),
    catchup=False,
    params={"input_path": "", "options": {"id_column": "id", "concurrency": 2}},
) as templated_options_dag:
    # options as one template (rendered to the dict's text: this DAG does not render native objects),
    # checked once rendered, in a live batch and in a fan-out's split, shards and merge.
    RunnerBatchOperator(
        task_id="classify_batch", task="classify", input_path="{{ params.input_path }}", via="live",
        options="{{ params.options }}",
    )  # fmt: skip
    batch_fanout(task="classify", input_path="{{ params.input_path }}", num_shards=2, prefix="fan_",
                 options="{{ params.options }}")


CLASSIFY_REPORTS = report_asset("classify", "/srv/runner-test-reports")

with DAG(
    dag_id="runner_test_report_asset",
    schedule=None,
    start_date=datetime(2024, 1, 1, tzinfo=UTC),
    catchup=False,
) as report_asset_dag:
    # a task whose report folder is an Asset: its event carries the run's manifest
    RunnerTaskOperator(task_id="classify", task="classify", inputs={"text": "x"}, outlets=[CLASSIFY_REPORTS])

with DAG(
    dag_id="runner_test_budget_stop",
    schedule=None,
    start_date=datetime(2024, 1, 1, tzinfo=UTC),
    catchup=False,
    default_args={"retries": 2, "retry_delay": timedelta(seconds=0)},
) as budget_stop_dag:
    # A budget over time (budgets.d/) the test writes stops the run: one try, not three.
    RunnerTaskOperator(task_id="classify", task="classify", inputs={"text": "x"})

with DAG(
    dag_id="runner_test_fanout_budget",
    schedule=None,
    start_date=datetime(2024, 1, 1, tzinfo=UTC),
    catchup=False,
    params={"input_path": ""},
    default_args={"retry_delay": timedelta(seconds=0)},
) as fanout_budget_dag:
    # Two shards at concurrency 32 under one daily budget, shared with `runner run` processes.
    batch_fanout(task="classify", input_path="{{ params.input_path }}", num_shards=2, concurrency=32, retries=2,
                 id_column="id")  # fmt: skip
