"""Runs stopped from outside under the real scheduler, and a fan-out in a pool of one slot.

Used by the deployment test (:mod:`tests.airflow.deploy.test_airflow_deploy`) with the DAGs of
``tests/airflow/deploy/dags/runner_stops.py``, each on its own loopback server:

* **deadline**: ``two_calls`` with tag ``DEADLINE`` answers its first call at once and its
  second only after :data:`SLOW_SECONDS`, longer than the task's ``execution_timeout``: the
  first try times out, the retry resumes the same runner run (the second call answered at once).
* **killed**: tag ``KILLED``: while its second call hangs, the running task instance is
  marked failed through the REST API (Airflow SIGTERMs it: ``on_kill``); the run record is
  read, then the task is cleared (as the UI's Clear) and runs again.
* **SIGKILL**: tag ``SIGKILLED``: while its second call hangs, the task process (Airflow titles
  it ``airflow worker -- <task instance id>``) is killed with ``SIGKILL``, as the OOM killer or
  a lost machine kills it: no ``on_kill``; Airflow retries it, and the retry resumes the run.
* **pool**: two runs of ``runner_pooled_fanout`` share a pool of one slot; in the second, a
  shard still waiting for the slot is marked success through the REST API (as an operator
  unblocking a queue might): it never ran, so its rows are missing and the merge must fail.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.airflow.deploy.deployment import Deployment

DAGS = Path(__file__).parent / "dags" / "runner_stops.py"
DAG_IDS = ("runner_deadline", "runner_killed", "runner_sigkilled", "runner_pooled_fanout")
POOL = "runner_one_slot"
SLOW_SECONDS = 60  # the deadline's slow reply: past the 40 s execution_timeout, answered (and billed) anyway
HANG_SECONDS = 240  # the killed task's second call: it waits until the task is killed
POOL_ROWS = 6
TWO_CALLS = """\
apiVersion: runner/v1
kind: Task
name: two_calls
inputs:
  tag: {type: string}
pipeline:
  steps:
    - {id: first, agent: plain, goal: "FIRST {{ inputs.tag }}"}
    - {id: second, agent: plain, depends_on: [first], goal: "SECOND {{ inputs.tag }}: {{ steps.first.output }}"}
"""


def scripts() -> dict[str, dict[str, Any]]:
    """The loopback servers' scripts, by connection suffix."""
    slow = {"when": {"last_message": "^SECOND DEADLINE"}, "times": 1, "reply": {"content": "late", "latency_seconds": SLOW_SECONDS}}
    return {"deadline": {"rules": [slow], "fallback": "One sentence."},
            "killed": {"rules": [_hang("KILLED")], "fallback": "One sentence."},
            "sigkilled": {"rules": [_hang("SIGKILLED")], "fallback": "One sentence."}}  # fmt: skip


def _hang(tag: str) -> dict[str, Any]:
    return {"when": {"last_message": f"^SECOND {tag}"}, "times": 1, "reply": {"hang_seconds": HANG_SECONDS}}


def prepare(project: Path, tickets: list[dict[str, str]], dags: Path) -> list[dict[str, str]]:
    """Add the ``two_calls`` task and the pool's input to the project, the DAG file to the DAG folder."""
    (project / "tasks.d" / "two_calls.yaml").write_text(TWO_CALLS)
    rows = [{**t, "id": f"P-{i:03d}"} for i, t in enumerate(tickets[:POOL_ROWS], start=1)]
    with (project / "tickets_pool.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    dags.mkdir(parents=True, exist_ok=True)
    shutil.copy(DAGS, dags / DAGS.name)
    return rows


def connections(urls: dict[str, str], key: str) -> dict[str, str]:
    """The ``runner_model_<name>`` connections as ``AIRFLOW_CONN_*`` variables (no CLI start-up per connection)."""
    return {f"AIRFLOW_CONN_RUNNER_MODEL_{name.upper()}": json.dumps({"conn_type": "runner_model", "host": url, "password": key})
            for name, url in urls.items()}  # fmt: skip


@dataclass
class Stops:
    """What the steps started and saw."""

    started: float = 0.0  # time.monotonic() when they were triggered
    deadline_run: str = ""
    killed_run: str = ""
    sigkilled_run: str = ""
    sigkilled_pid: int = 0
    killed_record: tuple[Any, ...] = ()  # the run store's row right after the kill: (status, error, attempts)
    killed_patch: Any = None
    cleared: Any = None
    pool_runs: list[str] = field(default_factory=list)  # [complete, one shard marked success unrun]
    marked_shard: int = -1
    marked_from: Any = None
    pool_spans: dict[str, list[tuple[str, int, str, str]]] = field(default_factory=dict)  # by run: (task, index, start, end)


POOL_REPLY_SECONDS = 2.0  # each pooled row's answer: the first run holds the slot while a shard of the second waits


def slowed(script: dict[str, Any]) -> dict[str, Any]:
    """``script`` with every reply taking :data:`POOL_REPLY_SECONDS`: the pooled runs last long
    enough for a shard of the second to be seen waiting for the slot, on a fast or a loaded machine."""
    def slow(reply: Any) -> Any:
        return {**reply, "latency_seconds": POOL_REPLY_SECONDS} if isinstance(reply, dict) else reply

    rules = [{**rule, "reply": slow(rule["reply"])} for rule in script.get("rules", [])]
    return {**script, "rules": rules, "fallback": slow(script.get("fallback"))}


def start(deployment: Deployment) -> Stops:
    """Create the pool, trigger every stop DAG through the REST API (no CLI start-up per run)."""
    deployment.api("pools", method="POST", body={"name": POOL, "slots": 1, "description": "runner e2e: one slot"})
    stops = Stops(started=time.monotonic())
    stops.deadline_run = _trigger(deployment, "runner_deadline")
    stops.killed_run = _trigger(deployment, "runner_killed")
    stops.sigkilled_run = _trigger(deployment, "runner_sigkilled")
    stops.pool_runs = [_trigger(deployment, "runner_pooled_fanout") for _ in range(2)]
    return stops


def _trigger(deployment: Deployment, dag_id: str) -> str:
    return str(deployment.api(f"dags/{dag_id}/dagRuns", method="POST", body={"logical_date": None})["dag_run_id"])


def _posts(server: Any, prefix: str) -> int:
    return sum(1 for r in server.requests if r.method == "POST" and r.body["messages"][-1]["content"].startswith(prefix))


def mark_a_waiting_shard_success(deployment: Deployment, stops: Stops) -> None:
    """In the second pool run, mark a shard that has not started (waiting for the slot) success."""
    dag_id, run_id = "runner_pooled_fanout", stops.pool_runs[1]
    waiting: dict[str, Any] = {}

    def a_shard_waits() -> bool:
        states = deployment.task_states(dag_id, run_id)
        for (task, index), (state, _) in sorted(states.items(), key=lambda kv: -kv[0][1]):
            if task == "run_shard" and index >= 0 and state in (None, "scheduled"):
                waiting.update(index=index, state=state)
                return True
        if any(s in ("success", "failed") for (t, _), (s, _) in states.items() if t == "merge"):
            raise AssertionError(f"the merge ended before a shard could be marked: {states}")
        return False

    deployment.wait(a_shard_waits, 300, "a pooled shard waiting for its slot")
    stops.marked_shard, stops.marked_from = waiting["index"], waiting["state"]
    path = f"dags/{dag_id}/dagRuns/{run_id}/taskInstances/run_shard/{waiting['index']}"
    deployment.api(path, method="PATCH", body={"new_state": "success"})


def kill_and_clear(deployment: Deployment, stops: Stops, server: Any, store: Any) -> None:
    """Mark the killed DAG's task failed while its second call hangs; read the run record; clear it."""
    dag_id, run_id = "runner_killed", stops.killed_run
    deployment.wait(lambda: _posts(server, "SECOND KILLED") >= 1, 300, "the killed task's second model call")
    path = f"dags/{dag_id}/dagRuns/{run_id}/taskInstances/two_calls"
    stops.killed_patch = deployment.api(path, method="PATCH", body={"new_state": "failed"})
    found: dict[str, Any] = {}

    def recorded() -> bool:
        rows = store("SELECT status, error, attempts FROM runs WHERE task = 'two_calls' AND inputs_json LIKE %s", '%"KILLED"%')
        if rows and rows[0][0] != "running":
            found["row"] = tuple(rows[0])
        return "row" in found

    deployment.wait(recorded, 120, "the killed run to record why it stopped")
    stops.killed_record = found["row"]
    deployment.wait_for_run(dag_id, run_id, 120)
    body = {"dry_run": False, "dag_run_id": run_id, "task_ids": ["two_calls"], "only_failed": False}
    stops.cleared = deployment.api(f"dags/{dag_id}/clearTaskInstances", method="POST", body=body)

    def ran_again() -> bool:
        state, attempt = deployment.task_states(dag_id, run_id).get(("two_calls", -1), (None, 0))
        return state in ("success", "failed") and attempt >= 2

    deployment.wait(ran_again, 300, "the cleared killed task to run again")


def sigkill_the_task_process(deployment: Deployment, stops: Stops, server: Any) -> None:
    """SIGKILL the ``runner_sigkilled`` task's process while its second call hangs."""
    deployment.wait(lambda: _posts(server, "SECOND SIGKILLED") >= 1, 300, "the SIGKILL task's second model call")
    ti = deployment.api(f"dags/runner_sigkilled/dagRuns/{stops.sigkilled_run}/taskInstances/two_calls")
    title = f"airflow worker -- {ti['id']}".encode()
    pids = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and _cmdline(p).startswith(title)]
    assert len(pids) == 1, (title, pids)
    stops.sigkilled_pid = pids[0]
    os.kill(pids[0], signal.SIGKILL)


def _cmdline(proc: Path) -> bytes:
    try:
        return (proc / "cmdline").read_bytes()
    except OSError:  # the process ended meanwhile
        return b""


def finish(deployment: Deployment, stops: Stops) -> None:
    """Wait for every stop DAG run; note when each pooled task ran (start, end)."""
    deployment.wait_for_run("runner_deadline", stops.deadline_run, 300)
    deployment.wait_for_run("runner_killed", stops.killed_run, 120)
    deployment.wait_for_run("runner_sigkilled", stops.sigkilled_run, 300)
    for run_id in stops.pool_runs:
        deployment.wait_for_run("runner_pooled_fanout", run_id, 600)
    for run_id in stops.pool_runs:
        found = deployment.api(f"dags/runner_pooled_fanout/dagRuns/{run_id}/taskInstances?limit=100")["task_instances"]
        stops.pool_spans[run_id] = [(t["task_id"], t["map_index"], t["start_date"], t["end_date"]) for t in found
                                    if t["start_date"] and t["end_date"]]  # fmt: skip


def wait_billed(server: Any, count: int, timeout: float = SLOW_SECONDS + 30) -> None:
    """The slow reply is billed when the server produces it, after its latency (the client long gone)."""
    deadline = time.monotonic() + timeout
    while len(server.billed) < count and time.monotonic() < deadline:
        time.sleep(0.5)
