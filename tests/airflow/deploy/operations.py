"""What an operator of the deployment does besides triggering DAGs, for the deployment test:
restart the triggerer while a provider batch is waited for, mark a deferred batch task failed,
trigger with a param value only the runner can refuse, backfill two logical dates, clear a
finished task, clear parts of a finished fan-out, run ``airflow tasks test``. Each step records what it saw in :class:`Operations`.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tests.airflow.deploy.deployment import Deployment

BACKFILL_DATES = ("2026-09-01", "2026-09-02")
TASKS_TEST_DATE = "2026-09-07"
MISSPELT_TASK = "daily_reprot"


@dataclass
class Operations:
    """What the operations did and saw."""

    restart: dict[str, Any] = field(default_factory=dict)  # the triggerer restart while runner_batch_api was deferred
    killed_run: str = ""  # the runner_batch_api run whose deferred task was marked failed
    killed_states: list[str] = field(default_factory=list)
    killed_batches: dict[str, Any] = field(default_factory=dict)
    misspelt_run: str = ""  # runner_daily_report with {"task": "daily_reprot"}
    backfill: Any = None  # `airflow backfill create`
    cleared: Any = None  # the REST clear (as the UI's) of the first backfilled run's task
    cli_cleared: Any = None  # `airflow tasks clear -s -e` of the second backfilled run's task
    tasks_test: Any = None  # `airflow tasks test`
    bad_row_run: str = ""  # a fan-out with a row the endpoint always refuses
    cleared_fanout_run: str = ""  # a fan-out whose merge, then one shard and merge, are cleared after it succeeded
    cleared_fanout_calls: dict[str, int] = field(default_factory=dict)  # its rows' model calls after each step


def task_state(deployment: Deployment, dag_id: str, run_id: str, task_id: str, index: int = -1) -> tuple[Any, int]:
    return deployment.task_states(dag_id, run_id).get((task_id, index), (None, 0))


def wait_deferred(deployment: Deployment, dag_id: str, run_id: str, task_id: str, seen: list[str]) -> None:
    """Wait until the task is ``deferred``, noting each state it passes through in ``seen``."""

    def deferred() -> bool:
        state, _ = task_state(deployment, dag_id, run_id, task_id)
        if state and (not seen or seen[-1] != state):
            seen.append(state)
        if state in ("success", "failed"):
            raise AssertionError(f"{dag_id}.{task_id} ended {state} without deferring: {seen}")
        return state == "deferred"

    deployment.wait(deferred, 300, f"{dag_id}.{task_id} to defer")


def restart_triggerer(deployment: Deployment, dag_id: str, run_id: str, retrieves: Any) -> dict[str, Any]:
    """Restart ``airflow triggerer`` while the task is deferred; what the batch had seen then."""
    before = retrieves()
    deployment.restart("triggerer")
    state, _ = task_state(deployment, dag_id, run_id, "batch_api")
    deployment.wait(lambda: retrieves() > before, 120, "the new triggerer to poll the same provider batch")
    return {"retrieves_before": before, "state_after": state}


def kill_deferred_batch(deployment: Deployment, ops: Operations, server: Any, conn_id: str) -> None:
    """Trigger runner_batch_api on ``server``, and when its task is deferred mark it failed (as in the UI)."""
    conf = {"input_path": "tickets_batch.csv", "id_column": "id", "batch_poll_seconds": 1, "conn_id": conn_id}
    ops.killed_run = trigger(deployment, "runner_batch_api", "--conf", json.dumps(conf))
    wait_deferred(deployment, "runner_batch_api", ops.killed_run, "batch_api", ops.killed_states)

    def polled_by_the_triggerer() -> bool:  # the worker checks the batch once before deferring; then the trigger polls
        return sum(1 for r in server.requests if r.method == "GET" and "/v1/batches/" in r.path) >= 2

    # Airflow calls on_kill only on a trigger a triggerer runs: a kill in the seconds before one picks it up
    # never reaches it (README: "Killing it")
    deployment.wait(polled_by_the_triggerer, 120, "the triggerer to run the killed task's trigger")
    path = f"dags/runner_batch_api/dagRuns/{ops.killed_run}/taskInstances/batch_api"
    deployment.api(path, method="PATCH", body={"new_state": "failed"})

    def cancelled() -> bool:
        return any(r.method == "POST" and r.path.endswith("/cancel") for r in server.requests)

    deployment.wait(cancelled, 120, "the triggerer to cancel the killed task's provider batch")


def trigger(deployment: Deployment, dag_id: str, *conf: str) -> str:
    done = deployment.airflow("dags", "trigger", dag_id, *conf, "--output", "json")
    return str(json.loads(done.stdout.strip().splitlines()[-1])[0]["dag_run_id"])  # the JSON is the last line


def backfill(deployment: Deployment) -> subprocess.CompletedProcess[str]:
    first, last = BACKFILL_DATES
    return deployment.airflow("backfill", "create", "--dag-id", "runner_daily_report", "--from-date", first,
                              "--to-date", last, "--max-active-runs", "1")  # fmt: skip


def backfilled_runs(deployment: Deployment) -> list[dict[str, Any]]:
    return [r for r in deployment.runs("runner_daily_report") if r["run_type"] == "backfill"]


def clear_first_backfilled(deployment: Deployment) -> tuple[Any, str, int]:
    """Clear the (finished) task of the first backfilled run as the UI's Clear does (the REST
    API, by dag run), wait for it to run again; ``(the API's answer, the dag run id, the try
    number before the clear)``."""
    run = next(r for r in backfilled_runs(deployment) if r["logical_date"].startswith(BACKFILL_DATES[0]))
    _, before = task_state(deployment, "runner_daily_report", run["dag_run_id"], "daily_report")
    body = {"dry_run": False, "dag_run_id": run["dag_run_id"], "task_ids": ["daily_report"], "only_failed": False}
    answer = deployment.api("dags/runner_daily_report/clearTaskInstances", method="POST", body=body)

    def ran_again() -> bool:
        state, attempt = task_state(deployment, "runner_daily_report", run["dag_run_id"], "daily_report")
        return state in ("success", "failed") and attempt > before

    deployment.wait(ran_again, 300, "the cleared task to run again")
    deployment.wait_for_run("runner_daily_report", run["dag_run_id"], 120)  # the run's state follows its task's
    return answer, str(run["dag_run_id"]), before


def clear_second_backfilled_with_cli(deployment: Deployment) -> tuple[subprocess.CompletedProcess[str], str, int]:
    """``airflow tasks clear`` of the second backfilled run's task, selected as the CLI selects
    runs (by logical date: ``-s``/``-e`` are inclusive bounds on it), wait for it to run again;
    ``(the CLI's process, the dag run id, the try number before the clear)``."""
    day = BACKFILL_DATES[1]
    run = next(r for r in backfilled_runs(deployment) if r["logical_date"].startswith(day))
    _, before = task_state(deployment, "runner_daily_report", run["dag_run_id"], "daily_report")
    # Airflow 3.3 matches --task-regex as a substring of the task id, not as a regex:
    # '^daily_report$' would match no task and clear nothing, silently (README: Airflow)
    done = deployment.airflow("tasks", "clear", "runner_daily_report", "--task-regex", "daily_report",
                              "--start-date", day, "--end-date", day, "--yes")  # fmt: skip

    def ran_again() -> bool:
        state, attempt = task_state(deployment, "runner_daily_report", run["dag_run_id"], "daily_report")
        return state in ("success", "failed") and attempt > before

    deployment.wait(ran_again, 300, "the task cleared by `airflow tasks clear` to run again")
    deployment.wait_for_run("runner_daily_report", run["dag_run_id"], 120)
    return done, str(run["dag_run_id"]), before


def clear_fanout_parts(deployment: Deployment, run_id: str, calls: Callable[[], int]) -> dict[str, int]:
    """Clear the successful fan-out's ``merge`` alone, then its shard 1 with its downstream merge,
    as the UI's Clear does (the REST API, by dag run), waiting for each to run again; the
    model calls of the fan-out's rows before the clears and after each."""
    seen = {"before": calls()}
    _clear_and_rerun(deployment, run_id, ["merge"], include_downstream=False)
    seen["merge_only"] = calls()
    _clear_and_rerun(deployment, run_id, [["run_shard", 1]], include_downstream=True)
    seen["one_shard"] = calls()
    return seen


def _clear_and_rerun(deployment: Deployment, run_id: str, task_ids: list[Any], *, include_downstream: bool) -> None:
    _, before = task_state(deployment, "runner_batch_fanout", run_id, "merge")
    body = {"dry_run": False, "dag_run_id": run_id, "task_ids": task_ids, "only_failed": False,
            "include_downstream": include_downstream}  # fmt: skip
    deployment.api("dags/runner_batch_fanout/clearTaskInstances", method="POST", body=body)

    def merged_again() -> bool:
        state, attempt = task_state(deployment, "runner_batch_fanout", run_id, "merge")
        return state in ("success", "failed") and attempt > before

    deployment.wait(merged_again, 300, f"the fan-out's merge to run again after clearing {task_ids}")
    deployment.wait_for_run("runner_batch_fanout", run_id, 120)
