"""Every day, run the runner task ``daily_report`` for the run's date.

The date is the ``date`` param when given, else the day of the run's logical date, else
(a manual ``airflow dags trigger`` has no logical date in Airflow 3) the day the run was
triggered (``run_after``), in UTC.

Needs on the workers: ``RUNNER_ROOT`` (the runner project with ``tasks.d/``) and a
``runner_model`` connection named ``runner_model_default`` (host = base URL, password = API
key), or the agent's own ``model:`` settings / ``OPENAI_*`` variables. A retry of the task
resumes the same runner run (see ``runner.airflow.execution.derive_run_id``), so completed
steps are not paid for twice (a clear after the task succeeded computes the report again); with the shared store (``RUNNER_STORE_CONN_ID`` or
``RUNNER_STORE_URL``) also on another worker. Reports go to ``RUNNER_REPORTS_DIR`` when set. Trigger with ``{"task": "other_task"}`` to run another task
(it must take a ``date`` input), ``{"date": "2026-11-30"}`` for another day, and
``{"max_cost_usd": 0.05}`` to tighten the cost cap.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from airflow.sdk import DAG, Param

from runner.airflow.operator import RunnerTaskOperator

RUN_DATE = "{{ params.date or (dag_run.logical_date or dag_run.run_after).strftime('%Y-%m-%d') }}"

with DAG(
    dag_id="runner_daily_report",
    description="Run the runner task daily_report once a day",
    schedule="@daily",
    start_date=datetime(2025, 1, 1, tzinfo=UTC),
    catchup=False,
    max_active_runs=1,
    default_args={"retries": 2, "retry_delay": timedelta(minutes=1)},
    render_template_as_native_obj=True,  # a null max_cost_usd renders as None (no cap), not as the text "None"
    params={
        "task": Param(
            "daily_report", type="string", minLength=1, description="runner task name or tasks.d/*.yaml path"
        ),
        "date": Param(None, type=["null", "string"], format="date", description="YYYY-MM-DD (default: the run's day)"),
        "max_cost_usd": Param(None, type=["null", "number"], minimum=0, description="tightens the task's cost cap"),
    },
    tags=["runner"],
) as dag:
    RunnerTaskOperator(
        task_id="daily_report",
        task="{{ params.task }}",
        inputs={"date": RUN_DATE},
        caps={"max_cost_usd": "{{ params.max_cost_usd }}"},
    )
