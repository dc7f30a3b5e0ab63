"""An ``execution_timeout`` that fires while the runner's own code runs (not while it waits on
the network) must still stop the run as a timeout: no row of a batch carries on past it, a
pipeline's finished step is not paid for again by the retry, and Airflow sees its own
``AirflowTaskTimeout`` (not an ``ExceptionGroup``), so it retries and calls ``on_kill``.

Airflow's real timeout (``airflow.sdk.execution_time.timeout``, a ``SIGALRM`` handler) guards
each call, with an hour to go; the test delivers the alarm itself at a chosen point inside the
run, where the real one lands when the deadline passes during a parse, a write or a callback.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.services import import_or_missing

import_or_missing("airflow", "apache-airflow is not installed (pip install 'runner[airflow]')")

from airflow.sdk.exceptions import AirflowTaskTimeout  # noqa: E402
from airflow.sdk.execution_time.timeout import timeout  # noqa: E402

from runner.airflow.execution import run_batch_for_airflow, run_task_for_airflow  # noqa: E402

# cancelling a run while its HTTP client is opening a connection drops a coroutine the client
# had made but not started (as Ctrl-C does); the interpreter reports it as unraisable
pytestmark = pytest.mark.filterwarnings(
    "ignore:Exception ignored in.*connect_tcp:pytest.PytestUnraisableExceptionWarning"
)

TWO_STEPS = {"rules": [{"when": {"last_message": "^STEP-TWO"}, "reply": "polished"}, {"reply": "a draft"}]}


def _alarm_once() -> Callable[[], None]:
    fired: list[bool] = []

    def fire() -> None:
        if not fired:
            fired.append(True)
            os.kill(os.getpid(), signal.SIGALRM)  # runs Python's handler right here, inside the run

    return fire


def _runs(project: Path) -> list[tuple[str, str]]:
    import sqlite3

    (store,) = (project / ".runner").glob("*.sqlite3")
    with contextlib.closing(sqlite3.connect(store)) as db:
        return [(str(s), str(e)) for s, e in db.execute("SELECT status, error FROM runs")]


def _posts(server: Any) -> list[str]:
    return [r.body["messages"][-1]["content"] for r in server.requests if r.method == "POST"]


@pytest.mark.slow(reason="a pipeline run to its deadline and retried")
def test_a_timeout_inside_a_pipeline_step_is_a_timeout_and_the_retry_keeps_the_finished_step(
    project: Path, scripted_server: Any
) -> None:
    fire = _alarm_once()

    def events(event: dict[str, Any]) -> None:
        if event.get("event") == "model_call":  # the draft step's call came back; the step is finishing
            fire()

    with scripted_server(TWO_STEPS) as server:
        identity = {
            "dag_id": "d",
            "dag_run_id": "r",
            "task_id": "t",
            "model_base_url": server.base_url,
            "api_key": "sk-t",
        }
        with pytest.raises(AirflowTaskTimeout), timeout(3600):
            run_task_for_airflow("two_step", root=project, inputs={"topic": "tides"}, events=events, **identity)
        retry = run_task_for_airflow("two_step", root=project, inputs={"topic": "tides"}, **identity)
        prompts = _posts(server)
    assert retry["status"] == "completed"
    assert sum(p.startswith("STEP-ONE") for p in prompts) == 1, "the retry resumed: the draft was not paid for again"
    assert sum(p.startswith("STEP-TWO") for p in prompts) == 1


def test_a_timeout_inside_a_batch_row_stops_the_batch_and_the_retry_pays_each_row_once(
    project: Path, tmp_path: Path, scripted_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from runner.batch.request import BatchRequest
    from runner.locations import location
    from runner.runs import execute

    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"id": f"r{i}", "text": f"row {i}"}) + "\n" for i in range(1, 7)))
    fire, real = _alarm_once(), execute.execute_task

    async def row_two_overruns(project_: Any, task: Any, inputs: dict[str, Any], options: Any, **kwargs: Any) -> Any:
        result = await real(project_, task, inputs, options, **kwargs)
        if inputs["text"] == "row 2":
            fire()  # the deadline passes inside the row's own code, after its run
        return result

    monkeypatch.setattr(execute, "execute_task", row_two_overruns)

    def request() -> BatchRequest:
        return BatchRequest(input_path=rows, output_path=location(str(tmp_path / "out.jsonl")), id_column="id",
                            concurrency=1, progress="none", journal_path=tmp_path / "journal.sqlite3")  # fmt: skip

    with scripted_server({"fallback": "label: ok"}) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-t")
        with pytest.raises(AirflowTaskTimeout), timeout(3600):
            run_batch_for_airflow("classify", root=project, request=request())
        before_retry = len(_posts(server))
        retry = run_batch_for_airflow("classify", root=project, request=request())
        prompts = _posts(server)
    assert before_retry == 2, "no row started after the deadline"
    assert (retry["done"], retry["failed"]) == (6, 0)
    assert sorted(prompts) == sorted(f"Classify: row {i}" for i in range(1, 7)), "each row paid for once"


def test_without_an_execution_timeout_nothing_is_guarded(project: Path, scripted_server: Any) -> None:
    """No alarm handler (a task without ``execution_timeout``): the run is not wrapped."""
    from runner.airflow.deadline import timeouts_cancel_the_run

    previous = signal.signal(signal.SIGALRM, signal.SIG_DFL)  # pytest-timeout may have one of its own
    try:
        with timeouts_cancel_the_run():
            assert signal.getsignal(signal.SIGALRM) == signal.SIG_DFL
        with scripted_server(TWO_STEPS) as server:
            done = run_task_for_airflow("two_step", root=project, inputs={"topic": "x"}, dag_id="d", dag_run_id="r",
                                        task_id="t", model_base_url=server.base_url, api_key="sk-t")  # fmt: skip
    finally:
        signal.signal(signal.SIGALRM, previous)
    assert done["status"] == "completed"


def test_a_run_that_ends_after_the_alarm_is_still_a_timeout() -> None:
    """The deadline passed: a result that arrives after the cancellation was asked for does not count."""
    from runner.airflow.deadline import timeouts_cancel_the_run

    with pytest.raises(AirflowTaskTimeout), timeout(3600), timeouts_cancel_the_run():
        os.kill(os.getpid(), signal.SIGALRM)  # no loop running: Airflow's handler raises at once


def test_the_work_that_outlives_the_grace_is_stopped_by_airflows_own_handler(monkeypatch: pytest.MonkeyPatch) -> None:
    """A run that does not wind down after the cancellation (a blocking call) still times out."""
    import asyncio

    from runner.airflow import deadline

    monkeypatch.setattr(deadline, "GRACE_SECONDS", 0.05)

    async def blocks_after_the_cancellation() -> None:
        os.kill(os.getpid(), signal.SIGALRM)
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            time.sleep(3600)  # a blocking call: only the second alarm, after the grace, ends it

    with pytest.raises(AirflowTaskTimeout), timeout(3600), deadline.timeouts_cancel_the_run():
        asyncio.run(blocks_after_the_cancellation())


def test_a_killed_task_cancels_its_run_and_the_retry_keeps_the_finished_step(
    project: Path, scripted_server: Any
) -> None:
    """``on_kill`` (Airflow's SIGTERM handler, in the task's main thread while the run's loop
    runs) cancels the run: it stops at once, and the retry pays only for what had not finished."""
    import asyncio

    from runner.airflow.operator import RunnerTaskOperator

    operator = RunnerTaskOperator(task_id="two_step", task="two_step")
    killed: list[bool] = []

    def events(event: dict[str, Any]) -> None:
        if event.get("event") == "step_started" and event.get("step") == "polish" and not killed:
            operator.on_kill()  # what Airflow's SIGTERM handler calls
            killed.append(True)

    with scripted_server(TWO_STEPS) as server:
        identity = {
            "dag_id": "d",
            "dag_run_id": "k",
            "task_id": "t",
            "model_base_url": server.base_url,
            "api_key": "sk-t",
        }
        with pytest.raises(asyncio.CancelledError):
            run_task_for_airflow("two_step", root=project, inputs={"topic": "tides"}, events=events, **identity)
        after_kill = _posts(server)
        retry = run_task_for_airflow("two_step", root=project, inputs={"topic": "tides"}, **identity)
        prompts = _posts(server)
    assert killed and [p[:8] for p in after_kill] == ["STEP-ONE"], "the polish call was never sent"
    assert retry["status"] == "completed"
    assert sum(p.startswith("STEP-ONE") for p in prompts) == 1 and sum(p.startswith("STEP-TWO") for p in prompts) == 1


def test_on_kill_without_a_running_run_does_nothing() -> None:
    """Airflow also calls ``on_kill`` after a timeout, when the run has already stopped."""
    from runner.airflow.deadline import cancel_the_running_run
    from runner.airflow.operator import RunnerTaskOperator

    assert cancel_the_running_run() is False
    RunnerTaskOperator(task_id="t", task="two_step").on_kill()


def test_the_real_alarm_during_a_model_call_is_a_timeout_and_the_retry_keeps_the_finished_step(
    project: Path, scripted_server: Any
) -> None:
    """Airflow's own timer, firing while the loop sleeps waiting for an answer that never comes."""
    script = {
        "rules": [
            {"when": {"last_message": "^STEP-TWO"}, "times": 1, "reply": {"hang_seconds": 30}},
            *TWO_STEPS["rules"],
        ]
    }
    started: list[str] = []

    def events(event: dict[str, Any]) -> None:
        if event.get("event") == "step_started" and event.get("step") == "polish" and not started:
            started.append("polish")
            signal.setitimer(signal.ITIMER_REAL, 0.2)  # Airflow's alarm, re-armed: fires during the hanging call

    with scripted_server(script) as server:
        identity = {
            "dag_id": "d",
            "dag_run_id": "h",
            "task_id": "t",
            "model_base_url": server.base_url,
            "api_key": "sk-t",
        }
        with pytest.raises(AirflowTaskTimeout), timeout(3600):
            run_task_for_airflow("two_step", root=project, inputs={"topic": "tides"}, events=events, **identity)
        stopped = _runs(project)
        retry = run_task_for_airflow("two_step", root=project, inputs={"topic": "tides"}, **identity)
        prompts = _posts(server)
    assert stopped == [("failed", "CancelledError: execution_timeout")], "the run record says why it stopped"
    assert started and retry["status"] == "completed"
    assert sum(p.startswith("STEP-ONE") for p in prompts) == 1, "the retry resumed: the draft was not paid for again"
