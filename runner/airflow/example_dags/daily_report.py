"""Every day, run the runner task ``daily_report`` for the day's date (``{{ ds }}``).

Needs on the workers: ``RUNNER_ROOT`` (the runner project with ``tasks.d/``) and a
``runner_model`` connection named ``runner_model_default`` (host = base URL, password = API
key), or the agent's own ``model:`` settings / ``OPENAI_*`` variables. A retry of the task
resumes the same runner run (see ``runner.airflow.execution.derive_run_id``), so completed
steps are not paid for twice. Trigger with ``{"task": "other_task"}`` to run another task.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from airflow.sdk import DAG

from runner.airflow.operator import RunnerTaskOperator

with DAG(
    dag_id="runner_daily_report",
    description="Run the runner task daily_report once a day",
    schedule="@daily",
    start_date=datetime(2025, 1, 1, tzinfo=UTC),
    catchup=False,
    max_active_runs=1,
    default_args={"retries": 2, "retry_delay": timedelta(minutes=1)},
    params={"task": "daily_report"},
    tags=["runner"],
) as dag:
    RunnerTaskOperator(
        task_id="daily_report",
        task="{{ params.task }}",
        inputs={"date": "{{ ds }}"},
    )
