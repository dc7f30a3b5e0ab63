"""Both example DAGs under a real Airflow: PostgreSQL, LocalExecutor, separate scheduler,
dag-processor and api-server processes, plain ``airflow dags trigger`` commands.

Run by ``.ci/airflow_e2e.sh`` (which starts PostgreSQL and sets ``RUNNER_AIRFLOW_DEPLOY_DB``
and ``RUNNER_AIRFLOW_DEPLOY_STORE``); skipped elsewhere. One deployment is set up for the
module, following the README's Airflow section, with the runner's state shared as a
multi-worker deployment shares it: the run store, the shard journals and the cap ledger in
PostgreSQL (the ``runner_store`` connection), shard outputs and reports in a shared location
reached through fsspec. Each test asserts on one part of what it did:

* the daily DAG runs a pipeline whose last step fails once; while Airflow waits to retry it,
  the worker's local disk (``$RUNNER_ROOT/.runner``, ``reports``) is wiped, and the retry
  resumes the run from the store without paying for its finished agent step again;
* the fan-out's flaky shard is retried the same way, after the same wipe, and pays for no
  finished row again;
* a second fan-out has a batch cost cap: it holds across its shards (one shard has nothing
  to spend, the other two spend more than an even split would have let them);
* the provider-batch DAG (``runner_batch_api``, a deferrable operator) submits one batch to a
  second model server with a slow Batch API, goes ``deferred`` (no worker slot held) while
  ``airflow triggerer`` polls it (and keeps polling it after the triggerer is restarted), then
  succeeds with every row collected; the trigger Airflow stored holds no key; a second run's
  deferred task marked failed through the REST API has its provider batch cancelled;
* the deployment is a deployer's: the runner comes from its built wheel, every process starts
  in ``/``, the project is on a read-only mount and the state in ``RUNNER_STATE_DIR``;
* an operator's actions (:mod:`tests.airflow.deploy.operations`): a param only the runner can
  refuse, a backfill of two logical dates, clearing a successful task (as the UI does, and with ``airflow
  tasks clear``: each recomputes its report as a new run), ``airflow tasks test``,
  a fan-out with a row no retry can fix (its DAG run fails), and a successful fan-out whose
  merge is cleared (it merges again, computing nothing), then one shard and the merge (that
  shard computes its rows again, in a new journal the merge merges).
"""

from __future__ import annotations

import contextlib
import csv
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from runner.model.batch_endpoints import BatchBehaviour
from tests.airflow.deploy import operations as ops_
from tests.airflow.deploy import stops as stops_
from tests.airflow.deploy.deployment import REPO, Deployment, free_port
from tests.airflow.deploy.operations import BACKFILL_DATES, MISSPELT_TASK, TASKS_TEST_DATE, Operations
from tests.airflow.deploy.worker_user import worker_user
from tests.support.project import copy_shipped
from tests.support.services import missing
from tests.wheel import build_and_install

DATABASE_URL = os.environ.get("RUNNER_AIRFLOW_DEPLOY_DB", "")
STORE_URL = os.environ.get("RUNNER_AIRFLOW_DEPLOY_STORE", "")
pytestmark = [
    pytest.mark.airflow_deploy,
    pytest.mark.timeout(1200),
    pytest.mark.skipif(not (DATABASE_URL and STORE_URL), reason="needs PostgreSQL: run .ci/airflow_e2e.sh"),
]

KEY = "sk-airflow-deploy-canary-0123456789abcdef"
TICKETS = 37  # the first 37 example tickets ...
REPEATS = 3  # ... and 3 more with the inputs of tickets 1-3 and their own ids: 40 rows
FLAKY = "T-00020"  # its first four model calls answer 503: one row attempt fails, the shard's retry runs it again
FLAKY_CALLS = 4  # the SDK's 3 retries + the first call
CAPPED_FREE = 25  # the capped fan-out: 25 rows without a body (invalid: shard 0 has nothing to spend) ...
CAPPED_PAID = 50  # ... then 50 tickets no other run sends
CAP_USD = 0.0012  # about 42 of those tickets' calls (~0.0000287 USD each; each reserves ~0.000135 first)
BATCH_TICKETS = 12  # the provider batch: the first 12 tickets, through a second model server ...
BATCH_POLLS = 8  # ... whose batches end at the 8th retrieve: about 20 s of polling in the triggerer
RESUME_DATE = "2026-03-02"
REJECTED = "ALWAYS-REJECTED"  # a ticket body the endpoint refuses every time (400): a row no retry can fix
BAD_ROWS = 5  # the fan-out with that row: 4 tickets no other run sends, then the refused one
CLEARED_ROWS = 4  # the fan-out cleared after it succeeded: two shards of two tickets no other run sends
RESUME_AGENT = """\
apiVersion: runner/v1
kind: Agent
name: plain
model: {id: gpt-4o-mini, max_tokens: 100, retries: 0}
system_prompt: You write one sentence.
"""
RESUME_TASK = """\
apiVersion: runner/v1
kind: Task
name: resume_check
inputs:
  date: {type: date}
workspace:
  files: [examples/data/sales.csv]
pipeline:
  steps:
    - {id: load, tool: load_table, args: {path: sales.csv, name: sales}}
    - id: totals
      tool: query_table
      depends_on: [load]
      args: {table: sales, group_by: [region], aggregations: {revenue: sum}, sort_by: [region], save_as: totals}
    - id: chart
      tool: chart
      depends_on: [totals]
      args: {table: totals, kind: bar, x: region, y: revenue_sum, title: Revenue, filename: regions.png}
    - {id: sandboxed, tool: shell, depends_on: [load], args: {command: "echo written-in-the-sandbox > probe.txt && cat probe.txt"}}
    - {id: draft, agent: plain, depends_on: [totals], goal: "DRAFT {{ inputs.date }}: {{ steps.totals.data.records | length }} regions"}
    - {id: final, agent: plain, depends_on: [draft, chart], goal: "FINAL {{ steps.draft.output }}"}
report:
  narrative_step: final
"""


@dataclass
class BatchApiOutcome:
    """What the provider-batch DAG run did, and what was seen while it was deferred."""

    run_id: str
    states_seen: list[str]
    pool: dict[str, Any]  # default_pool while the task was deferred
    triggers: list[tuple[str, str]]  # Airflow's trigger table while it was deferred: (classpath, stored kwargs)
    batches_created: int = 0
    uploads: int = 0
    chat_calls: int = 0


@dataclass
class Outcome:
    """What the deployment did, for the tests to check."""

    deployment: Deployment
    project: Path
    tickets: list[dict[str, str]]
    capped: list[dict[str, str]]
    fanout_run: str
    capped_run: str
    daily_run: str
    requests: list[Any]
    refused: Any = None
    batch: BatchApiOutcome | None = None
    connection_tests: dict[str, Any] = field(default_factory=dict)
    runs: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # by dag id, read before the services stop
    states: dict[str, Any] = field(default_factory=dict)  # by dag run id: {(task_id, map_index): (state, try)}
    wiped: dict[str, list[str]] = field(default_factory=dict)  # what each wipe removed from the worker's disk
    ops: Operations = field(default_factory=Operations)
    bad_rows: list[dict[str, str]] = field(default_factory=list)
    package_check: Any = None  # where an Airflow process imports runner from, and the DAG folder's import errors
    kill_requests: list[Any] = field(default_factory=list)
    kill_batches_created: int = 0
    stops: stops_.Stops = field(default_factory=stops_.Stops)
    stop_calls: dict[str, tuple[list[Any], list[Any]]] = field(default_factory=dict)  # by server: (requests, billed)


def _bad_rows(project: Path, name: str = "tickets_bad.csv") -> list[dict[str, str]]:
    with (project / name).open(newline="") as handle:
        return list(csv.DictReader(handle))


def _calls_for(server: Any, tickets: list[dict[str, str]]) -> Callable[[], int]:
    """How many model calls ``server`` has had for ``tickets``' prompts, when called."""
    prompts = {_prompt(t) for t in tickets}
    return lambda: sum(1 for r in server.requests if r.method == "POST" and r.body["messages"][-1]["content"] in prompts)


def _project(base: Path) -> tuple[Path, list[dict[str, str]], list[dict[str, str]]]:
    """A runner project (the repository's agents and tasks, and ``resume_check``) with two ticket files."""
    root = copy_shipped(base / "project", ("agents.d", "tasks.d", "examples/data/sales.csv"),
                        {"agents.d/plain.yaml": RESUME_AGENT, "tasks.d/resume_check.yaml": RESUME_TASK})  # fmt: skip
    with (REPO / "examples/batch/tickets.csv").open(newline="") as handle:
        reader = csv.DictReader(handle)
        columns = list(reader.fieldnames or [])
        every = list(reader)
    rows = every[:TICKETS]
    rows += [{**rows[i], "id": f"T-9000{i + 1}"} for i in range(REPEATS)]
    _write(root / "tickets.csv", columns, rows)
    seen = {_prompt(t) for t in rows}
    paid = []
    for ticket in every[TICKETS:]:  # tickets whose prompt no other run sends, so the model server's counts tell them apart
        if _prompt(ticket) not in seen and _flaky_prefix(rows) not in ticket["body"]:
            seen.add(_prompt(ticket))
            paid.append(ticket)
    free = [{**every[0], "id": f"F-{i:03d}", "body": ""} for i in range(CAPPED_FREE)]
    capped = free + paid[:CAPPED_PAID]
    _write(root / "tickets_capped.csv", columns, capped)
    _write(root / "tickets_batch.csv", columns, rows[:BATCH_TICKETS])
    bad = paid[CAPPED_PAID : CAPPED_PAID + BAD_ROWS - 1]
    bad.append({**bad[0], "id": "B-REJECTED", "body": f"{REJECTED}: this ticket is refused by the endpoint"})
    _write(root / "tickets_bad.csv", columns, bad)
    first_cleared = CAPPED_PAID + BAD_ROWS - 1
    _write(root / "tickets_cleared.csv", columns, paid[first_cleared : first_cleared + CLEARED_ROWS])
    return root, rows, capped


def _flaky_prefix(tickets: list[dict[str, str]]) -> str:
    """What the flaky rule matches: the start of the flaky ticket's body."""
    return next(t for t in tickets if t["id"] == FLAKY)["body"][:60]


def _write(path: Path, columns: list[str], rows: list[dict[str, str]]) -> None:
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, columns)
        writer.writeheader()
        writer.writerows(rows)


def _prompt(ticket: dict[str, str]) -> str:
    """The triage task's goal for ``ticket``, as the model server sees it (the template ends with a newline)."""
    return f"Product: {ticket['product']}\nSubject: {ticket['subject']}\n{ticket['body']}\n"


def _script(tickets: list[dict[str, str]]) -> dict[str, Any]:
    script = yaml.safe_load((REPO / "examples/batch/triage_script.yaml").read_text())
    fault = {"name": "flaky", "when": {"last_message": re.escape(_flaky_prefix(tickets))}, "times": FLAKY_CALLS,
             "reply": {"fault": {"status": 503}}}  # fmt: skip
    final_fails_once = {"name": "final", "when": {"last_message": "^FINAL"}, "times": 1, "reply": {"fault": {"status": 400}}}
    refused = {"name": "refused", "when": {"last_message": REJECTED}, "reply": {"fault": {"status": 400}}}
    script["rules"][:0] = [fault, final_fails_once, refused, {"when": {"last_message": "^DRAFT"}, "reply": "Four regions sold."}]
    return script


def _trigger(deployment: Deployment, dag_id: str, *conf: str, check: bool = True) -> Any:
    done = deployment.airflow("dags", "trigger", dag_id, *conf, "--output", "json", check=check)
    if not check:
        return done
    return json.loads(done.stdout.strip().splitlines()[-1])[0]["dag_run_id"]  # the JSON is the last line


def _flaky_shard(tickets: list[dict[str, str]]) -> int:
    row = next(i for i, t in enumerate(tickets, start=1) if t["id"] == FLAKY)
    return 0 if row <= 14 else 1 if row <= 27 else 2


def _wipe_local_disk(deployment: Deployment) -> list[str]:
    """What a new worker would not have: everything the runner left on this one's disk (its
    state directory, and what a writable project would hold)."""
    places = [deployment.state, deployment.project / ".runner", deployment.project / "reports"]
    gone = [str(p.relative_to(place)) for place in places for p in place.rglob("*") if p.is_file()]
    for place in places[1:]:
        shutil.rmtree(place, ignore_errors=True)
    for path in deployment.state.iterdir():  # the directory stays: the deployer provisioned it for the worker's user
        shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
    return sorted(gone)


def _wipe_between_tries(deployment: Deployment, waits: dict[str, tuple[str, str, int]]) -> dict[str, list[str]]:
    """Wipe the worker's disk when each task in ``waits`` ({name: (dag id, run id, map index)}) is waiting to be retried."""
    wiped: dict[str, list[str]] = {}

    def all_wiped() -> bool:
        for name, (dag_id, run_id, index) in waits.items():
            if name in wiped:
                continue
            state = {k[1]: v for k, v in deployment.task_states(dag_id, run_id).items() if k[0] in ("daily_report", "run_shard")}
            now, attempt = state.get(index, (None, 0))
            if now == "up_for_retry":
                wiped[name] = _wipe_local_disk(deployment)
            elif (attempt or 0) > 1 or now in ("success", "failed"):
                raise AssertionError(f"{name}: the retry began before the disk could be wiped ({now}, try {attempt})")
        return len(wiped) == len(waits)

    deployment.wait(all_wiped, 600, "the first tries to fail (to wipe the disk before their retries)")
    return wiped


@pytest.fixture(scope="module")
def outcome(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Outcome]:
    from runner.model.server import ScriptedServer

    base = tmp_path_factory.mktemp("airflow-deploy")
    project, tickets, capped = _project(base)
    begun = time.monotonic()
    _, package = build_and_install(base / "wheel")  # the deployment runs the package as built, not the checkout
    deployment = Deployment(base, DATABASE_URL, project, package, worker_user())
    deployment.timed("wheel built and installed", begun)
    ops = Operations()
    triage = yaml.safe_load((REPO / "examples/batch/triage_script.yaml").read_text())
    batch_api = ScriptedServer(triage, batch=BatchBehaviour(polls=BATCH_POLLS), api_key=KEY)
    kill_api = ScriptedServer(triage, batch=BatchBehaviour(polls=10_000), api_key=KEY)  # out until cancelled
    stop_apis = {name: ScriptedServer(script, api_key=KEY) for name, script in stops_.scripts().items()}
    stop_apis["pool"] = ScriptedServer(stops_.slowed(triage), api_key=KEY)
    with ScriptedServer(_script(tickets)) as server, batch_api, kill_api, contextlib.ExitStack() as servers:
        for api in stop_apis.values():
            servers.enter_context(api)
        started = time.monotonic()
        deployment.airflow("db", "migrate", timeout=600)
        deployment.timed("airflow db migrate", started)
        deployment.install_dags()
        stops_.prepare(project, tickets, deployment.dags)
        deployment.env.update(stops_.connections({n: api.base_url for n, api in stop_apis.items()}, KEY))
        for name, url in (("runner_model_default", server.base_url), ("runner_model_batch", batch_api.base_url),
                          ("runner_model_kill", kill_api.base_url), ("runner_model_closed", f"http://127.0.0.1:{free_port()}/v1")):
            deployment.airflow("connections", "add", name, "--conn-type", "runner_model", "--conn-host", url,
                               "--conn-password", KEY)  # fmt: skip
        deployment.add_store_connection(STORE_URL)
        tests = {name: deployment.airflow("connections", "test", name, check=False)
                 for name in ("runner_model_default", "runner_model_closed")}  # fmt: skip
        package_check = _package_check(deployment)
        started = time.monotonic()
        deployment.start()
        try:
            deployment.wait(lambda: _parsed(deployment), 300, "the example DAGs to be parsed")
            deployment.timed("services up, DAGs parsed", started)
            started = time.monotonic()
            batch = _deferred_batch(deployment)  # first, alone: while it waits, no task holds a worker slot
            deployment.timed("provider batch submitted and deferred", started)
            ops.restart = ops_.restart_triggerer(deployment, "runner_batch_api", batch.run_id,
                                                 lambda: _retrieves(batch_api))  # fmt: skip
            deployment.timed("triggerer restarted, the same batch polled again", started)
            ops_.kill_deferred_batch(deployment, ops, kill_api, "runner_model_kill")
            deployment.timed("a deferred task marked failed, its batch cancelled", started)
            deployment.airflow("dags", "unpause", "runner_daily_report")
            deployment.airflow("dags", "unpause", "runner_batch_fanout")
            refused = _trigger(deployment, "runner_batch_fanout", check=False)
            daily = _trigger(deployment, "runner_daily_report", "--conf",
                             json.dumps({"task": "resume_check", "date": RESUME_DATE}))  # fmt: skip
            conf = json.dumps({"input_path": "tickets.csv", "id_column": "id", "num_shards": 3, "max_attempts": 1,
                               "concurrency": 4})  # fmt: skip
            fanout = _trigger(deployment, "runner_batch_fanout", "--conf", conf)
            capped_conf = json.dumps({"input_path": "tickets_capped.csv", "id_column": "id", "num_shards": 3,
                                      "concurrency": 1, "max_cost_usd": CAP_USD, "max_failed_rows": 100})  # fmt: skip
            capped_run = _trigger(deployment, "runner_batch_fanout", "--conf", capped_conf)
            wiped = _wipe_between_tries(deployment, {
                "daily": ("runner_daily_report", daily, -1),
                "fanout": ("runner_batch_fanout", fanout, _flaky_shard(tickets)),
            })  # fmt: skip
            # the operations start once the disk was wiped: a wipe would pull a running task's workspace away
            stops = stops_.start(deployment)
            stops_.mark_a_waiting_shard_success(deployment, stops)  # first: the pooled runs take seconds
            ops.bad_row_run = _trigger(deployment, "runner_batch_fanout", "--conf", json.dumps(
                {"input_path": "tickets_bad.csv", "id_column": "id", "num_shards": 2, "concurrency": 2}))  # fmt: skip
            ops.misspelt_run = _trigger(deployment, "runner_daily_report", "--conf", json.dumps({"task": MISSPELT_TASK}))
            ops.backfill = ops_.backfill(deployment)  # queued behind the runs above (max_active_runs=1)
            tasks_test = subprocess.Popen(  # in an operator's shell while the retries run (after the wipes: same disk)
                deployment.argv("tasks", "test", "runner_daily_report", "daily_report", TASKS_TEST_DATE),
                env=deployment.env, cwd="/", stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            )  # fmt: skip
            stops_.kill_and_clear(deployment, stops, stop_apis["killed"], _store)
            stops_.sigkill_the_task_process(deployment, stops, stop_apis["sigkilled"])
            deployment.timed("stop operations done (a task killed and cleared, a shard marked success)", started)
            ops.tasks_test = (tasks_test.wait(300), tasks_test.communicate()[0])
            for run_id in (fanout, capped_run, ops.bad_row_run):
                deployment.wait_for_run("runner_batch_fanout", run_id, 900)
            deployment.wait(lambda: len(ops_.backfilled_runs(deployment)) == len(BACKFILL_DATES), 120, "the backfill's runs")
            for run in deployment.runs("runner_daily_report"):
                deployment.wait_for_run("runner_daily_report", run["dag_run_id"], 600)
            ops.cleared = ops_.clear_first_backfilled(deployment)
            ops.cli_cleared = ops_.clear_second_backfilled_with_cli(deployment)
            for run_id in (batch.run_id, ops.killed_run):
                deployment.wait_for_run("runner_batch_api", run_id, 600)
            stops_.finish(deployment, stops)
            deployment.timed("the stop DAGs, triggered to finished", stops.started)
            # after the stops, whose deadlines a busy machine could miss: a fan-out cleared in parts once it succeeded
            ops.cleared_fanout_run = _trigger(deployment, "runner_batch_fanout", "--conf", json.dumps(
                {"input_path": "tickets_cleared.csv", "id_column": "id", "num_shards": 2}))  # fmt: skip
            deployment.wait_for_run("runner_batch_fanout", ops.cleared_fanout_run, 300)
            ops.cleared_fanout_calls = ops_.clear_fanout_parts(
                deployment, ops.cleared_fanout_run, _calls_for(server, _bad_rows(project, "tickets_cleared.csv"))
            )
            deployment.timed("a fan-out cleared in parts, run again", stops.started)
            stops_.wait_billed(stop_apis["deadline"], 3)
            deployment.timed("every DAG run, triggered to finished", started)
            runs = {dag_id: deployment.runs(dag_id) for dag_id in (*DAG_IDS, *stops_.DAG_IDS)}
            states = {r["dag_run_id"]: deployment.task_states(dag_id, r["dag_run_id"])
                      for dag_id, found in runs.items() for r in found}  # fmt: skip
            requests = server.requests
            batch.batches_created = batch_api.batches.batches_created
            batch.uploads = sum(1 for f in batch_api.batches.files.values() if f.purpose == "batch")
            batch.chat_calls = sum(1 for r in batch_api.requests if r.path.endswith("/chat/completions"))
            kill_requests, kill_created = kill_api.requests, kill_api.batches.batches_created
            stop_calls = {name: (api.requests, api.billed) for name, api in stop_apis.items()}
        finally:
            deployment.stop()
    deployment.timed("whole deployment test", begun)
    yield Outcome(deployment, project, tickets, capped, fanout, capped_run, daily, requests, refused, batch, tests,
                  runs, states, wiped, ops, _bad_rows(project), package_check, kill_requests, kill_created,
                  stops, stop_calls)  # fmt: skip
    print(f"\nairflow deploy timings (s): {json.dumps(deployment.timings)}")


DAG_IDS = ("runner_daily_report", "runner_batch_fanout", "runner_batch_api")
PACKAGE_CHECK = """
import json, os, sys, runner, runner.airflow.operator
print("RUNNER", json.dumps({"module": runner.__file__, "cwd": os.getcwd(), "path0": sys.path[0], "uid": os.geteuid()}))
"""


def _package_check(deployment: Deployment) -> dict[str, Any]:
    """Where an Airflow process of the deployment imports runner from, what `airflow dags
    list-import-errors` says of the DAG folder, and whether the project is read-only to it."""
    errors = deployment.airflow("dags", "list-import-errors", "--output", "json", check=False)
    argv = deployment.mounted(sys.executable, "-c", PACKAGE_CHECK)
    done = subprocess.run(argv, env=deployment.env, cwd="/", capture_output=True, text=True, timeout=120, check=False)
    found = next((json.loads(line[7:]) for line in done.stdout.splitlines() if line.startswith("RUNNER ")), {})
    probe = deployment.mounted("sh", "-c", f"touch {deployment.project}/.probe && rm {deployment.project}/.probe")
    writable = subprocess.run(probe, env=deployment.env, cwd="/", capture_output=True, check=False).returncode == 0
    return {"import_errors": errors, "runner": found, "project_writable": writable, "stderr": done.stderr[-2000:]}


def _retrieves(server: Any) -> int:
    """Status checks of the (one) provider batch on ``server``."""
    return sum(1 for r in server.requests if r.method == "GET" and re.fullmatch(r"/v1/batches/[^/]+", r.path))


def _parsed(deployment: Deployment) -> bool:
    try:
        ids = {dag["dag_id"] for dag in deployment.api("dags")["dags"]}
    except OSError:
        return False
    return {*DAG_IDS, *stops_.DAG_IDS} <= ids


def _deferred_batch(deployment: Deployment) -> BatchApiOutcome:
    """Trigger the provider-batch DAG and wait until its task is deferred; what was seen then."""
    deployment.airflow("dags", "unpause", "runner_batch_api")
    conf = {"input_path": "tickets_batch.csv", "id_column": "id", "batch_poll_seconds": 1, "conn_id": "runner_model_batch"}
    batch = BatchApiOutcome(_trigger(deployment, "runner_batch_api", "--conf", json.dumps(conf)), [], {}, [])

    def deferred() -> bool:
        state, _ = deployment.task_states("runner_batch_api", batch.run_id).get(("batch_api", -1), (None, 0))
        if state and (not batch.states_seen or batch.states_seen[-1] != state):
            batch.states_seen.append(state)
        if state in ("success", "failed"):
            raise AssertionError(f"the batch_api task ended {state} without deferring: {batch.states_seen}")
        if state != "deferred":
            return False
        batch.pool = deployment.api("pools/default_pool")
        batch.triggers = _airflow_db("SELECT classpath, kwargs FROM trigger")
        return True

    deployment.wait(deferred, 300, "the batch_api task to defer")
    return batch


def _airflow_db(sql: str) -> list[tuple[Any, ...]]:
    import psycopg

    with psycopg.connect(DATABASE_URL.replace("postgresql+psycopg://", "postgresql://"), autocommit=True) as db:
        return db.execute(sql).fetchall()


def _prompts(outcome: Outcome) -> list[str]:
    return [r.body["messages"][-1]["content"] for r in outcome.requests if r.method == "POST"]


def _merged(outcome: Outcome, run_id: str) -> Path:
    from runner.airflow.plan import run_key

    return outcome.deployment.work / run_key("runner_batch_fanout", run_id, "fanout")


def _store(sql: str, *params: Any) -> list[tuple[Any, ...]]:
    import psycopg

    with psycopg.connect(STORE_URL, autocommit=True) as db:
        return db.execute(sql, params).fetchall()


def test_every_dag_run_succeeds_from_plain_triggers(outcome: Outcome) -> None:
    fanout = outcome.states[outcome.fanout_run]
    assert {k: s for k, (s, _) in fanout.items()} == {
        ("split", -1): "success", ("run_shard", 0): "success", ("run_shard", 1): "success",
        ("run_shard", 2): "success", ("merge", -1): "success",
    }  # fmt: skip
    assert {k: s for k, s in outcome.states[outcome.capped_run].items()} == {
        ("split", -1): ("success", 1), ("run_shard", 0): ("success", 1), ("run_shard", 1): ("success", 1),
        ("run_shard", 2): ("success", 1), ("merge", -1): ("success", 1),
    }  # fmt: skip  # a cap is not retried: another try would meet it again
    daily_runs = _plain_daily_runs(outcome)
    assert outcome.daily_run in {r["dag_run_id"] for r in daily_runs}
    for run in daily_runs:  # the triggered run (no logical date) and any run the unpause scheduled
        assert run["state"] == "success", run
        tries = 2 if run["dag_run_id"] == outcome.daily_run else 1
        assert outcome.states[run["dag_run_id"]] == {("daily_report", -1): ("success", tries)}
    triggered = next(r for r in daily_runs if r["dag_run_id"] == outcome.daily_run)
    assert triggered["logical_date"] is None and triggered["run_type"] == "manual"


def _plain_daily_runs(outcome: Outcome) -> list[dict[str, Any]]:
    """The daily DAG's runs but those of the operations (a refused param, the backfill, `tasks test`)."""
    return [r for r in outcome.runs["runner_daily_report"] if r["dag_run_id"] != outcome.ops.misspelt_run
            and r["run_type"] != "backfill" and not r["dag_run_id"].startswith("__airflow_temporary_run")]  # fmt: skip


def _extra_dates() -> tuple[str, ...]:
    return (*BACKFILL_DATES, TASKS_TEST_DATE)


def test_a_retry_on_a_wiped_disk_resumes_the_run_and_pays_nothing_twice(outcome: Outcome) -> None:
    assert any(p.endswith("charts/regions.png") for p in outcome.wiped["daily"]), outcome.wiped  # try 1's workspace
    prompts = _prompts(outcome)
    assert sum(p.startswith("DRAFT") for p in prompts) == 1  # the finished agent step came from the store
    assert sum(p.startswith("FINAL") for p in prompts) == 2  # the failed step ran again, once
    ((run_id, attempts, status),) = _store("SELECT run_id, attempts, status FROM runs WHERE task = 'resume_check'")
    assert (attempts, status) == (2, "completed")
    report = outcome.deployment.reports / "resume_check" / run_id
    record = json.loads((report / "report.json").read_text())
    assert [s["id"] for s in record["steps"] if s.get("resumed")] == ["draft"]
    assert any("not on this machine" in w and "chart, load, sandboxed, totals ran again" in w for w in record["warnings"])
    assert (report / "artifacts/charts/regions.png").is_file()  # rebuilt by the tool steps that ran again
    second_try = _task_log(outcome, "runner_daily_report", "daily_report", -1, 2)
    assert f"runner run {run_id}: completed" in second_try


def test_the_merged_output_has_one_record_per_input_row_with_its_id(outcome: Outcome) -> None:
    work = _merged(outcome, outcome.fanout_run)
    records = [json.loads(line) for line in (work / "output.jsonl").read_text().splitlines()]
    assert [(r["row"], r["id"], r["status"]) for r in records] == [
        (i, t["id"], "done") for i, t in enumerate(outcome.tickets, start=1)
    ]
    assert all(r["output"]["category"] in ("billing", "bug", "account", "other") for r in records)
    report = json.loads((work / "batch_report.json").read_text())
    assert report["rows"] == 40 and report["counts"]["done"] == 40 and len(report["shards"]) == 3
    assert not (work / "journals").exists()  # the journals are in the shared store
    found = dict(_store("SELECT journal, COUNT(*) FROM journal_rows GROUP BY journal"))
    journals = {name: rows for name, rows in found.items() if name.startswith("runner_batch_fanout/")}
    assert len(journals) == 11  # 3 + 3 + 2 shards, and the cleared fan-out's 2 and its recomputed shard's
    others = {name.split("/")[0] for name in found} - {"runner_batch_fanout", "runner_batch_api", "runner_pooled_fanout"}
    assert others == set(), found
    assert sum(journals.values()) == len(outcome.tickets) + len(outcome.capped) + len(outcome.bad_rows) + CLEARED_ROWS + 2


def test_the_model_server_saw_each_row_once_plus_the_retried_one(outcome: Outcome) -> None:
    prompts = _prompts(outcome)
    first = {_prompt(t) for t in outcome.tickets}
    capped = {_prompt(t) for t in outcome.capped}
    triage = [p for p in prompts if p in first]
    daily = [p for p in prompts if "Write the summary" in p]
    resume = [p for p in prompts if p.startswith(("DRAFT", "FINAL"))]
    capped_calls = [p for p in prompts if p in capped]
    bad = [p for p in prompts if p in {_prompt(t) for t in outcome.bad_rows}]
    recomputed = [p for p in prompts if p in {_prompt(t) for t in _bad_rows(outcome.project, "tickets_cleared.csv")}]
    assert len(triage) + len(daily) + len(resume) + len(capped_calls) + len(bad) + len(recomputed) == len(prompts)
    flaky = next(t for t in outcome.tickets if t["id"] == FLAKY)
    assert sum(flaky["body"] in p for p in triage) == FLAKY_CALLS + 1
    assert len(triage) == 40 + FLAKY_CALLS, "no row is paid for twice, not even after the disk was wiped"
    plain = [p for p in daily if not any(day in p for day in _extra_dates())]
    cleared, other, tested = (sum(day in p for p in prompts) for day in _extra_dates())
    # One run's calls: the scripted answer misses the figures, so the summary is asked afresh up to
    # max_repairs times (repair: resample) before the figures are listed instead; `airflow tasks test` made one run.
    per_run = tested
    assert len(plain) == (len(_plain_daily_runs(outcome)) - 1) * per_run  # every run but the resume_check one, once
    assert cleared == other == 2 * per_run > 0  # both backfilled runs were cleared after they succeeded: computed again
    assert len(capped_calls) == len(set(capped_calls)), "a capped row is never sent twice"


def test_the_shard_retry_ran_the_row_whose_attempts_were_used_up(outcome: Outcome) -> None:
    states = outcome.states[outcome.fanout_run]
    shard = _flaky_shard(outcome.tickets)
    assert states[("run_shard", shard)] == ("success", 2)
    assert all(states[("run_shard", i)] == ("success", 1) for i in range(3) if i != shard)
    first_try = _task_log(outcome, "runner_batch_fanout", "run_shard", shard, 1)
    assert "1 of 13 row(s) not done (failed 1, invalid 0, not run 0): server_error: 1 (e.g. T-00020" in first_try
    assert "fanout" in outcome.wiped  # the retry ran after the worker's disk was wiped


def test_a_fanout_cost_cap_holds_across_its_shards(outcome: Outcome) -> None:
    work = _merged(outcome, outcome.capped_run)
    report = json.loads((work / "batch_report.json").read_text())
    ledger = report["ledger"]
    spent = ledger["spent"]["cost_usd"]
    assert ledger["caps"] == {"max_cost_usd": CAP_USD} and spent <= CAP_USD
    assert ledger["reserved"]["model_calls"] == 0
    shards = {s["shard"]: s for s in report["shards"]}
    costs = [s["cost_usd"] for s in report["shards"]]
    assert costs[0] == 0 and spent == pytest.approx(sum(costs)) == pytest.approx(report["cost_usd"])
    assert spent > 2 * CAP_USD / 3, "an even split would have held shards 1 and 2 to a third of the cap each"
    assert max(costs) > CAP_USD / 3
    records = [json.loads(line) for line in (work / "output.jsonl").read_text().splitlines()]
    done = [r for r in records if r["status"] == "done"]
    not_run = [r for r in records if r["status"] == "not_run"]
    assert len(records) == CAPPED_FREE + CAPPED_PAID and [r["status"] for r in records[:CAPPED_FREE]] == ["invalid"] * CAPPED_FREE
    assert not_run and all(r["error_kind"] == "max_cost_usd" for r in not_run)
    assert len(done) == ledger["spent"]["model_calls"] == sum(p in {_prompt(t) for t in outcome.capped} for p in _prompts(outcome))
    markdown = (work / "batch_report.md").read_text()
    assert "Batch caps, shared by every shard" in markdown and len(shards) == 3


def test_nothing_shared_is_left_on_the_worker(outcome: Outcome) -> None:
    assert not list(outcome.project.rglob("*.sqlite3")), "the run store and journals are in PostgreSQL"
    assert not list(outcome.deployment.state.rglob("*.sqlite3")), "... not in the worker's state directory either"
    assert not (outcome.project / "reports").exists(), "reports went to the shared location"


def test_no_log_holds_a_secret(outcome: Outcome) -> None:
    from urllib.parse import urlsplit

    password = urlsplit(STORE_URL).password
    home = outcome.deployment.home
    logs = [p for part in ("logs", "service-logs") for p in (home / part).rglob("*") if p.is_file()]
    assert logs and password
    leaked = [p for p in logs if KEY in p.read_text(errors="replace") or password in p.read_text(errors="replace")]
    assert leaked == []


def test_a_trigger_without_input_path_is_refused(outcome: Outcome) -> None:
    refused = outcome.refused
    assert refused.returncode != 0
    assert "input_path" in refused.stdout + refused.stderr
    assert sorted(r["dag_run_id"] for r in outcome.runs["runner_batch_fanout"]) == sorted(
        [outcome.fanout_run, outcome.capped_run, outcome.ops.bad_row_run, outcome.ops.cleared_fanout_run]
    )


def test_connections_test_makes_a_real_request(outcome: Outcome) -> None:
    good, closed = outcome.connection_tests["runner_model_default"], outcome.connection_tests["runner_model_closed"]
    assert good.returncode == 0 and "Connection success!" in good.stdout
    assert closed.returncode == 1 and "Connection failed!" in closed.stdout and "cannot connect" in closed.stdout
    assert sum(1 for r in outcome.requests if r.method == "GET" and r.path == "/v1/models") == 1


def _task_log(outcome: Outcome, dag_id: str, task_id: str, map_index: int, attempt: int, run_id: str = "*") -> str:
    root = outcome.deployment.home / "logs" / f"dag_id={dag_id}"
    mapped = f"map_index={map_index}/" if map_index >= 0 else ""
    found = list(root.glob(f"run_id={run_id}/task_id={task_id}/{mapped}attempt={attempt}.log"))
    assert found, sorted(str(p) for p in root.rglob("*.log"))
    return "\n".join(p.read_text(errors="replace") for p in found)


def test_the_provider_batch_waited_in_the_triggerer_holding_no_worker_slot(outcome: Outcome) -> None:
    batch = outcome.batch
    assert batch is not None
    assert "deferred" in batch.states_seen, batch.states_seen
    assert outcome.states[batch.run_id] == {("batch_api", -1): ("success", 1)}
    assert batch.pool["deferred_slots"] == 1 and batch.pool["running_slots"] == 0, batch.pool  # no worker slot held
    first_try = _task_log(outcome, "runner_batch_api", "batch_api", -1, 1)
    assert "deferring to the triggerer" in first_try


def test_the_provider_saw_one_batch_and_every_row_was_collected(outcome: Outcome) -> None:
    from runner.airflow.plan import run_key

    batch = outcome.batch
    assert batch is not None
    assert (batch.batches_created, batch.uploads, batch.chat_calls) == (1, 1, 0), "one provider batch, submitted once"
    work = outcome.deployment.work / run_key("runner_batch_api", batch.run_id, "batch_api")
    records = [json.loads(line) for line in (work / "output.jsonl").read_text().splitlines()]
    assert [(r["id"], r["status"]) for r in records] == [(t["id"], "done") for t in outcome.tickets[:BATCH_TICKETS]]
    assert all(r["output"]["category"] in ("billing", "bug", "account", "other") for r in records)
    assert json.loads((work / "batch_report.json").read_text())["counts"]["done"] == BATCH_TICKETS
    journals = dict(_store("SELECT journal, COUNT(*) FROM journal_rows WHERE status = 'done' GROUP BY journal"))
    assert [rows for name, rows in journals.items() if name.startswith("runner_batch_api/")] == [BATCH_TICKETS]


def test_the_trigger_airflow_stored_names_the_connection_never_the_key(outcome: Outcome) -> None:
    batch = outcome.batch
    assert batch is not None and batch.triggers, "the deferred task had a trigger row"
    ((classpath, stored),) = batch.triggers
    kwargs = _decrypted(outcome.deployment, stored)
    assert classpath == "runner.airflow.triggers.ProviderBatchTrigger"
    assert "runner_model_batch" in kwargs and "batch_0" in kwargs  # readable: the check below means something
    assert KEY not in kwargs and KEY not in stored
    assert "cancel_on_kill" in kwargs  # a user's kill cancels the batch (the operator's default)


def _decrypted(deployment: Deployment, stored: str) -> str:
    """A trigger's stored kwargs as text (decrypted when the deployment has a Fernet key)."""
    key = deployment.airflow("config", "get-value", "core", "fernet_key", check=False).stdout.strip()
    if not key or "batch_0" in stored:
        return stored
    from cryptography.fernet import Fernet

    return Fernet(key.encode()).decrypt(stored.encode()).decode()


# --- the deployment as a deployer builds it, and what its operators do ----------------------


def test_every_process_runs_the_built_wheel_from_slash_with_the_project_read_only(outcome: Outcome) -> None:
    check, deployment = outcome.package_check, outcome.deployment
    assert Path(check["runner"]["module"]).is_relative_to(deployment.package), check  # not the checkout
    assert check["runner"]["cwd"] == "/"
    assert json.loads(check["import_errors"].stdout.strip().splitlines()[-1] or "[]") == [], check["import_errors"].stdout
    if not deployment.read_only:
        missing("bubblewrap cannot mount the project read-only here")
    assert check["project_writable"] is False
    assert not (outcome.project / ".runner").exists() and not (outcome.project / "reports").exists()
    assert (deployment.state / "workspaces").is_dir(), "the runs' workspaces went to $RUNNER_STATE_DIR"


def test_a_triggerer_restart_mid_wait_picks_up_the_same_batch(outcome: Outcome) -> None:
    batch = outcome.batch
    assert batch is not None
    restart = outcome.ops.restart
    assert restart["state_after"] == "deferred" and 0 < restart["retrieves_before"] < BATCH_POLLS, restart
    assert outcome.states[batch.run_id] == {("batch_api", -1): ("success", 1)}
    assert batch.batches_created == 1, "the restarted triggerer waited for the batch already out: none was submitted again"


def test_marking_a_deferred_batch_task_failed_cancels_its_provider_batch(outcome: Outcome) -> None:
    ops = outcome.ops
    assert "deferred" in ops.killed_states
    assert outcome.states[ops.killed_run] == {("batch_api", -1): ("failed", 1)}
    assert next(r for r in outcome.runs["runner_batch_api"] if r["dag_run_id"] == ops.killed_run)["state"] == "failed"
    cancels = [r.path for r in outcome.kill_requests if r.method == "POST" and r.path.endswith("/cancel")]
    assert outcome.kill_batches_created == 1 and len(cancels) == 1, cancels


def test_a_param_only_the_runner_can_refuse_fails_once_with_its_message(outcome: Outcome) -> None:
    run_id = outcome.ops.misspelt_run
    assert outcome.states[run_id] == {("daily_report", -1): ("failed", 1)}, "not retried (the task has retries=2)"
    log = _task_log(outcome, "runner_daily_report", "daily_report", -1, 1, run_id)
    assert f"unknown task '{MISSPELT_TASK}'. Did you mean 'daily_report'?" in log
    assert "runner.errors" not in log, "the runner's message, not its traceback"


def test_a_backfill_of_two_logical_dates_gives_each_its_own_run(outcome: Outcome) -> None:
    assert outcome.ops.backfill.returncode == 0
    backfilled = [r for r in outcome.runs["runner_daily_report"] if r["run_type"] == "backfill"]
    assert sorted(r["logical_date"][:10] for r in backfilled) == list(BACKFILL_DATES)
    assert all(r["state"] == "success" for r in backfilled)
    found = _store("SELECT run_id, inputs_json FROM runs WHERE task = 'daily_report'")
    ids = {json.loads(inputs)["date"]: run_id for run_id, inputs in found if json.loads(inputs)["date"] in BACKFILL_DATES}
    assert len(ids) == 2 and len(set(ids.values())) == 2, found  # separate runner runs: no collision


def _recomputed_after_the_clear(outcome: Outcome, run_id: str, before: int, day: str) -> None:
    """The cleared (successful) task's new try made a new runner run, the next generation of the
    run id, and computed the report again: a clear after a success is a request to run again."""
    assert outcome.states[run_id] == {("daily_report", -1): ("success", before + 1)}
    rows = sorted((r, s) for r, i, s in _store("SELECT run_id, inputs_json, status FROM runs WHERE task = 'daily_report'")
                  if json.loads(i)["date"] == day)  # fmt: skip
    assert [s for _, s in rows] == ["completed", "completed"], rows
    (first, _), (second, _) = rows
    assert second == f"{first}-g2", rows
    log = _task_log(outcome, "runner_daily_report", "daily_report", -1, before + 1, run_id)
    assert "[summary] agent step started (report_writer)" in log and "reused from an earlier attempt" not in log
    assert re.search(rf"run {re.escape(second)} completed \(exit 0\): [1-9]\d* model call", log)  # a new call was made


def test_clearing_a_successful_task_recomputes_its_report(outcome: Outcome) -> None:
    answer, run_id, before = outcome.ops.cleared
    assert [(ti["task_id"], ti["dag_run_id"]) for ti in answer["task_instances"]] == [("daily_report", run_id)]
    _recomputed_after_the_clear(outcome, run_id, before, BACKFILL_DATES[0])
    prompts = _prompts(outcome)
    summaries = sum(BACKFILL_DATES[0] in p for p in prompts)
    assert summaries == 2 * sum(TASKS_TEST_DATE in p for p in prompts) > 0, "the model server saw a new call"


def test_tasks_test_runs_a_task_and_shows_its_progress(outcome: Outcome) -> None:
    returncode, output = outcome.ops.tasks_test
    assert returncode == 0, output[-3000:]
    assert "[summary] agent step started (report_writer)" in output and "think #1" in output
    assert re.search(r"run daily_report-af-\w+ completed \(exit 0\): \d+ model call", output)
    assert KEY not in output


def test_a_fanout_with_a_row_no_retry_can_fix_fails_its_dag_run(outcome: Outcome) -> None:
    run_id = outcome.ops.bad_row_run
    states = outcome.states[run_id]
    assert states[("merge", -1)] == ("failed", 1) and states[("split", -1)] == ("success", 1)
    assert all(states[("run_shard", i)] == ("success", 1) for i in range(2)), states  # a final error is not retried
    assert next(r for r in outcome.runs["runner_batch_fanout"] if r["dag_run_id"] == run_id)["state"] == "failed"
    log = _task_log(outcome, "runner_batch_fanout", "merge", -1, 1, run_id)
    assert f"1 of {BAD_ROWS} row(s) not done" in log and "B-REJECTED" in log and "max_failed_rows=0" in log


def test_clearing_a_successful_fanouts_merge_merges_again_and_one_shard_computes_it_again(outcome: Outcome) -> None:
    run_id = outcome.ops.cleared_fanout_run
    assert outcome.ops.cleared_fanout_calls == {
        "before": CLEARED_ROWS, "merge_only": CLEARED_ROWS, "one_shard": CLEARED_ROWS + 2,
    }  # fmt: skip  # merging again computes nothing; the cleared shard computes its two rows again, shard 0 nothing
    states = outcome.states[run_id]
    assert states[("split", -1)] == ("success", 1) and states[("run_shard", 0)] == ("success", 1)
    assert states[("run_shard", 1)] == ("success", 2) and states[("merge", -1)] == ("success", 3)
    work = _merged(outcome, run_id)
    report = json.loads((work / "batch_report.json").read_text())
    assert [(s["shard"], s["generation"]) for s in report["shards"]] == [
        ("shard-00000-of-00002", 1), ("shard-00001-of-00002", 2),
    ]  # fmt: skip
    assert report["counts"]["done"] == CLEARED_ROWS
    records = [json.loads(line) for line in (work / "output.jsonl").read_text().splitlines()]
    cleared = _bad_rows(outcome.project, "tickets_cleared.csv")
    assert [(r["id"], r["status"]) for r in records] == [(t["id"], "done") for t in cleared]
    from runner.airflow.plan import run_key

    key = run_key("runner_batch_fanout", run_id, "fanout")
    journals = dict(_store("SELECT journal, COUNT(*) FROM journal_rows WHERE journal LIKE %s GROUP BY journal", key + "/%"))
    assert journals == {f"{key}/shard-00000-of-00002": 2, f"{key}/shard-00001-of-00002": 2,
                        f"{key}/shard-00001-of-00002-g2": 2}  # fmt: skip


def test_the_task_log_shows_the_runs_progress_and_summary(outcome: Outcome) -> None:
    log = _task_log(outcome, "runner_daily_report", "daily_report", -1, 2, outcome.daily_run)
    assert "started: task resume_check, resuming (attempt 2; reusing draft)" in log
    assert "[final] agent step started (plain)" in log and "| spent $" in log
    assert re.search(r"run resume_check-af-\w+ completed \(exit 0\): \d+ model call\(s\), \d+ tool call", log)


def test_the_tasks_ran_as_the_non_root_worker_user(outcome: Outcome) -> None:
    deployment = outcome.deployment
    user = deployment.user
    if user is None:
        missing("no $RUNNER_AIRFLOW_DEPLOY_USER (set by .ci/airflow_e2e.sh), or not root, or no bubblewrap")
    assert outcome.package_check["runner"]["uid"] == user.uid, outcome.package_check
    written = [p for place in (deployment.state, deployment.shared) for p in place.rglob("*")]
    assert any(p.name == "report.json" for p in written) and (deployment.state / "workspaces").is_dir()
    foreign = [str(p) for p in written if p.lstat().st_uid != user.uid]
    assert foreign == [], "everything the tasks wrote is the worker user's"
    shared = [p for p in deployment.shared.rglob("*") if p.is_file()]
    private = [f"{p.relative_to(deployment.shared)} {oct(p.stat().st_mode)}" for p in shared if not p.stat().st_mode & 0o004]
    assert shared and private == [], "reports and outputs in the shared location are readable by the deployment's other users"
    ((run_id,),) = _store("SELECT run_id FROM runs WHERE task = 'resume_check'")
    record = json.loads((deployment.reports / "resume_check" / run_id / "report.json").read_text())
    sandboxed = next(s for s in record["steps"] if s["id"] == "sandboxed")  # bubblewrap started by the non-root worker
    assert sandboxed["status"] == "completed" and "written-in-the-sandbox" in json.dumps(sandboxed), sandboxed
    keys = list(deployment.state.rglob("project-cache.key"))  # no home directory: the per-user cache is in the state dir
    assert [k.relative_to(deployment.state).parts[0] for k in keys] == ["user-cache"], keys
    assert keys[0].stat().st_mode & 0o077 == 0


def test_airflow_tasks_clear_with_dates_recomputes_a_backfilled_task(outcome: Outcome) -> None:
    done, run_id, before = outcome.ops.cli_cleared
    assert "Clearing" in done.stdout + done.stderr or done.returncode == 0, done.stderr[-2000:]
    _recomputed_after_the_clear(outcome, run_id, before, BACKFILL_DATES[1])


# --- runs stopped from outside, and a pool of one slot (tests/airflow/deploy/stops.py) ------


def _two_calls(outcome: Outcome, server: str, tag: str) -> tuple[list[str], list[Any], tuple[Any, ...]]:
    """The posts and billed usage of a stop server, and the run store's row of its ``two_calls`` run."""
    requests, billed = outcome.stop_calls[server]
    posts = [r.body["messages"][-1]["content"] for r in requests if r.method == "POST"]
    ((row),) = _store("SELECT status, attempts, error, input_tokens, output_tokens, model_calls FROM runs "
                      "WHERE task = 'two_calls' AND inputs_json LIKE %s", f'%"{tag}"%')  # fmt: skip
    return posts, billed, tuple(row)


def _tokens_billed(billed: list[Any]) -> tuple[int, int]:
    return sum(u.get("prompt_tokens", 0) for _, u in billed), sum(u.get("completion_tokens", 0) for _, u in billed)


def test_an_execution_timeout_during_a_slow_call_fails_the_try_and_the_retry_pays_nothing_twice(outcome: Outcome) -> None:
    stops = outcome.stops
    last = _task_log(outcome, "runner_deadline", "two_calls", -1, 2, stops.deadline_run)
    assert outcome.states[stops.deadline_run] == {("two_calls", -1): ("success", 2)}, last[-4000:]
    posts, billed, (status, attempts, _, input_tokens, output_tokens, _) = _two_calls(outcome, "deadline", "DEADLINE")
    assert sum(p.startswith("FIRST DEADLINE") for p in posts) == 1, "the retry resumed: the first step not paid again"
    assert sum(p.startswith("SECOND DEADLINE") for p in posts) == 2, "the timed-out call, then the retry's"
    assert len(billed) == 3, "the late reply is billed too (the provider answered after the client left)"
    assert (status, attempts) == ("completed", 2)
    billed_in, billed_out = _tokens_billed(billed)
    assert input_tokens >= billed_in and output_tokens >= billed_out, "the run counts what the provider billed"
    first_try = _task_log(outcome, "runner_deadline", "two_calls", -1, 1, stops.deadline_run)
    assert "AirflowTaskTimeout" in first_try or "Timeout" in first_try, first_try[-3000:]
    second_try = _task_log(outcome, "runner_deadline", "two_calls", -1, 2, stops.deadline_run)
    assert "resuming (attempt 2; reusing first)" in second_try, second_try[-3000:]


def test_a_running_task_marked_failed_cancels_its_run_and_a_clear_resumes_it(outcome: Outcome) -> None:
    stops = outcome.stops
    assert [ti["state"] for ti in stops.killed_patch["task_instances"]] == ["failed"], stops.killed_patch
    status, error, attempts = stops.killed_record
    assert (status, attempts) == ("failed", 1) and "killed" in str(error), stops.killed_record  # why it stopped
    assert outcome.states[stops.killed_run] == {("two_calls", -1): ("success", 2)}
    posts, billed, (status, attempts, _, input_tokens, output_tokens, _) = _two_calls(outcome, "killed", "KILLED")
    assert sum(p.startswith("FIRST KILLED") for p in posts) == 1, "the re-run resumed: the first step not paid again"
    assert sum(p.startswith("SECOND KILLED") for p in posts) == 2
    assert len(billed) == 2, "the hanging call was never answered"
    assert (status, attempts) == ("completed", 2)
    billed_in, billed_out = _tokens_billed(billed)
    assert input_tokens >= billed_in and output_tokens >= billed_out
    killed_try = _task_log(outcome, "runner_killed", "two_calls", -1, 1, stops.killed_run)
    assert "its run is cancelled" in killed_try, killed_try[-3000:]
    rerun = _task_log(outcome, "runner_killed", "two_calls", -1, 2, stops.killed_run)
    assert "resuming (attempt 2; reusing first)" in rerun, rerun[-3000:]


def test_a_task_process_killed_with_sigkill_is_retried_and_the_retry_pays_nothing_twice(outcome: Outcome) -> None:
    stops = outcome.stops
    assert stops.sigkilled_pid > 0
    assert outcome.states[stops.sigkilled_run] == {("two_calls", -1): ("success", 2)}
    posts, billed, (status, attempts, _, input_tokens, output_tokens, _) = _two_calls(outcome, "sigkilled", "SIGKILLED")
    assert sum(p.startswith("FIRST SIGKILLED") for p in posts) == 1, "the retry resumed: the first step not paid again"
    assert sum(p.startswith("SECOND SIGKILLED") for p in posts) == 2
    assert len(billed) == 2, "the hanging call was never answered"
    assert (status, attempts) == ("completed", 2)
    billed_in, billed_out = _tokens_billed(billed)
    assert input_tokens >= billed_in and output_tokens >= billed_out
    retry = _task_log(outcome, "runner_sigkilled", "two_calls", -1, 2, stops.sigkilled_run)
    assert "resuming (attempt 2; reusing first)" in retry, retry[-3000:]


def test_a_fanout_in_a_pool_of_one_slot_runs_one_task_at_a_time_to_the_end(outcome: Outcome) -> None:
    from runner.airflow.plan import run_key

    stops = outcome.stops
    complete, marked = stops.pool_runs
    assert {k: s for k, (s, _) in outcome.states[complete].items()} == {
        ("split", -1): "success", ("run_shard", 0): "success", ("run_shard", 1): "success",
        ("run_shard", 2): "success", ("merge", -1): "success",
    }  # fmt: skip
    work = outcome.deployment.work / run_key("runner_pooled_fanout", complete, "fanout")
    records = [json.loads(line) for line in (work / "output.jsonl").read_text().splitlines()]
    assert [(r["id"], r["status"]) for r in records] == [(f"P-{i:03d}", "done") for i in range(1, stops_.POOL_ROWS + 1)]
    spans = sorted((start, end, run, task, index) for run, found in stops.pool_spans.items()
                   for task, index, start, end in found if (run, task, index) != (marked, "run_shard", stops.marked_shard))  # fmt: skip
    assert len(spans) >= 5 + 3
    overlapping = [(a, b) for a, b in itertools.pairwise(spans) if b[0] < a[1]]
    assert overlapping == [], "one slot: no two tasks of the pool ran at once"
    requests, _ = outcome.stop_calls["pool"]
    prompts = [r.body["messages"][-1]["content"] for r in requests if r.method == "POST"]
    assert prompts and max(prompts.count(p) for p in prompts) <= 2, "each row paid at most once per dag run"


def test_a_shard_marked_success_before_it_ran_fails_the_merge(outcome: Outcome) -> None:
    stops = outcome.stops
    marked = stops.pool_runs[1]
    states = outcome.states[marked]
    assert stops.marked_from in (None, "scheduled")
    assert states[("run_shard", stops.marked_shard)][0] == "success"
    assert states[("merge", -1)] == ("failed", 1), states
    assert next(r for r in outcome.runs["runner_pooled_fanout"] if r["dag_run_id"] == marked)["state"] == "failed"
    log = _task_log(outcome, "runner_pooled_fanout", "merge", -1, 1, marked)
    assert f"shard {stops.marked_shard + 1}" in log.lower() or "returned no result" in log, log[-3000:]
    assert "returned no result" in log
