"""Both example DAGs under a real Airflow: PostgreSQL, LocalExecutor, separate scheduler,
dag-processor and api-server processes, plain ``airflow dags trigger`` commands.

Run by ``.ci/airflow_e2e.sh`` (which starts PostgreSQL and sets ``RUNNER_AIRFLOW_DEPLOY_DB``);
skipped elsewhere. One deployment is set up for the module, following the README's Airflow
section, and each test asserts on one part of what it did.

Not covered here (needs the shared run store and journal of issue 14 part 2): a retry on a
worker whose local disk was wiped. Here every worker shares one disk.
"""

from __future__ import annotations

import csv
import json
import re
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.airflow.deploy.deployment import REPO, Deployment, free_port

DATABASE_URL = __import__("os").environ.get("RUNNER_AIRFLOW_DEPLOY_DB", "")
pytestmark = [
    pytest.mark.airflow_deploy,
    pytest.mark.timeout(1200),
    pytest.mark.skipif(not DATABASE_URL, reason="needs PostgreSQL: run .ci/airflow_e2e.sh"),
]

KEY = "sk-airflow-deploy-canary-0123456789abcdef"
TICKETS = 37  # the first 37 example tickets ...
REPEATS = 3  # ... and 3 more with the inputs of tickets 1-3 and their own ids: 40 rows
FLAKY = "T-00020"  # its first four model calls answer 503: one row attempt fails, the shard's retry runs it again
FLAKY_CALLS = 4  # the SDK's 3 retries + the first call


@dataclass
class Outcome:
    """What the deployment did, for the tests to check."""

    deployment: Deployment
    project: Path
    tickets: list[dict[str, str]]
    fanout_run: str
    daily_run: str
    requests: list[Any]
    refused: Any = None
    connection_tests: dict[str, Any] = field(default_factory=dict)
    runs: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # by dag id, read before the services stop
    states: dict[str, Any] = field(default_factory=dict)  # by dag run id: {(task_id, map_index): (state, try)}


def _project(base: Path) -> tuple[Path, list[dict[str, str]]]:
    """A runner project (the repository's agents and tasks) with a 40-row ticket file."""
    root = base / "project"
    for part in ("agents.d", "tasks.d"):
        shutil.copytree(REPO / part, root / part)
    (root / "examples/data").mkdir(parents=True)
    shutil.copy(REPO / "examples/data/sales.csv", root / "examples/data/sales.csv")
    with (REPO / "examples/batch/tickets.csv").open(newline="") as handle:
        reader = csv.DictReader(handle)
        columns = list(reader.fieldnames or [])
        rows = [row for _, row in zip(range(TICKETS), reader, strict=False)]
    rows += [{**rows[i], "id": f"T-9000{i + 1}"} for i in range(REPEATS)]
    with (root / "tickets.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, columns)
        writer.writeheader()
        writer.writerows(rows)
    return root, rows


def _script(tickets: list[dict[str, str]]) -> dict[str, Any]:
    script = yaml.safe_load((REPO / "examples/batch/triage_script.yaml").read_text())
    flaky = next(t for t in tickets if t["id"] == FLAKY)
    fault = {"name": "flaky", "when": {"last_message": re.escape(flaky["body"][:60])}, "times": FLAKY_CALLS,
             "reply": {"fault": {"status": 503}}}  # fmt: skip
    script["rules"].insert(0, fault)
    return script


def _trigger(deployment: Deployment, dag_id: str, *conf: str, check: bool = True) -> Any:
    done = deployment.airflow("dags", "trigger", dag_id, *conf, "--output", "json", check=check)
    if not check:
        return done
    return json.loads(done.stdout.strip().splitlines()[-1])[0]["dag_run_id"]  # the JSON is the last line


@pytest.fixture(scope="module")
def outcome(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Outcome]:
    from runner.model.server import ScriptedServer

    base = tmp_path_factory.mktemp("airflow-deploy")
    project, tickets = _project(base)
    deployment = Deployment(base, DATABASE_URL, project)
    begun = time.monotonic()
    with ScriptedServer(_script(tickets)) as server:
        started = time.monotonic()
        deployment.airflow("db", "migrate", timeout=600)
        deployment.timed("airflow db migrate", started)
        deployment.install_dags()
        deployment.airflow("connections", "add", "runner_model_default", "--conn-type", "runner_model",
                           "--conn-host", server.base_url, "--conn-password", KEY)  # fmt: skip
        closed = f"http://127.0.0.1:{free_port()}/v1"
        deployment.airflow("connections", "add", "runner_model_closed", "--conn-type", "runner_model",
                           "--conn-host", closed, "--conn-password", KEY)  # fmt: skip
        tests = {name: deployment.airflow("connections", "test", name, check=False)
                 for name in ("runner_model_default", "runner_model_closed")}  # fmt: skip
        started = time.monotonic()
        deployment.start()
        try:
            deployment.wait(lambda: _parsed(deployment), 300, "both example DAGs to be parsed")
            deployment.timed("services up, DAGs parsed", started)
            started = time.monotonic()
            deployment.airflow("dags", "unpause", "runner_daily_report")
            deployment.airflow("dags", "unpause", "runner_batch_fanout")
            refused = _trigger(deployment, "runner_batch_fanout", check=False)
            daily = _trigger(deployment, "runner_daily_report")
            conf = json.dumps({"input_path": "tickets.csv", "id_column": "id", "num_shards": 3, "max_attempts": 1,
                               "concurrency": 4})  # fmt: skip
            fanout = _trigger(deployment, "runner_batch_fanout", "--conf", conf)
            deployment.wait_for_run("runner_batch_fanout", fanout, 900)
            for run in deployment.runs("runner_daily_report"):
                deployment.wait_for_run("runner_daily_report", run["dag_run_id"], 300)
            deployment.timed("both DAG runs, triggered to finished", started)
            runs = {dag_id: deployment.runs(dag_id) for dag_id in ("runner_daily_report", "runner_batch_fanout")}
            states = {r["dag_run_id"]: deployment.task_states(dag_id, r["dag_run_id"])
                      for dag_id, found in runs.items() for r in found}  # fmt: skip
            requests = server.requests
        finally:
            deployment.stop()
    deployment.timed("whole deployment test", begun)
    yield Outcome(deployment, project, tickets, fanout, daily, requests, refused, tests, runs, states)
    print(f"\nairflow deploy timings (s): {json.dumps(deployment.timings)}")


def _parsed(deployment: Deployment) -> bool:
    try:
        ids = {dag["dag_id"] for dag in deployment.api("dags")["dags"]}
    except OSError:
        return False
    return {"runner_daily_report", "runner_batch_fanout"} <= ids


def _prompts(outcome: Outcome) -> list[str]:
    return [r.body["messages"][-1]["content"] for r in outcome.requests if r.method == "POST"]


def test_both_dags_succeed_from_plain_triggers(outcome: Outcome) -> None:
    fanout = outcome.states[outcome.fanout_run]
    assert {k: s for k, (s, _) in fanout.items()} == {
        ("split", -1): "success", ("run_shard", 0): "success", ("run_shard", 1): "success",
        ("run_shard", 2): "success", ("merge", -1): "success",
    }  # fmt: skip
    daily_runs = outcome.runs["runner_daily_report"]
    assert outcome.daily_run in {r["dag_run_id"] for r in daily_runs}
    for run in daily_runs:  # the triggered run (no logical date) and any run the unpause scheduled
        assert run["state"] == "success", run
        assert outcome.states[run["dag_run_id"]] == {("daily_report", -1): ("success", 1)}
    triggered = next(r for r in daily_runs if r["dag_run_id"] == outcome.daily_run)
    assert triggered["logical_date"] is None and triggered["run_type"] == "manual"


def test_the_merged_output_has_one_record_per_input_row_with_its_id(outcome: Outcome) -> None:
    merged = sorted((outcome.deployment.work / "runner_batch_fanout").glob("*/fanout/output.jsonl"))
    assert len(merged) == 1
    records = [json.loads(line) for line in merged[0].read_text().splitlines()]
    assert [(r["row"], r["id"], r["status"]) for r in records] == [
        (i, t["id"], "done") for i, t in enumerate(outcome.tickets, start=1)
    ]
    assert all(r["output"]["category"] in ("billing", "bug", "account", "other") for r in records)
    report = json.loads((merged[0].parent / "batch_report.json").read_text())
    assert report["rows"] == 40 and report["counts"]["done"] == 40 and len(report["shards"]) == 3


def test_the_model_server_saw_each_row_once_plus_the_retried_one(outcome: Outcome) -> None:
    prompts = _prompts(outcome)
    triage = [p for p in prompts if p.startswith("Product:")]
    daily = [p for p in prompts if "Write the summary" in p]
    assert len(triage) + len(daily) == len(prompts)
    flaky = next(t for t in outcome.tickets if t["id"] == FLAKY)
    assert sum(flaky["body"] in p for p in triage) == FLAKY_CALLS + 1
    assert len(triage) == 40 + FLAKY_CALLS, "no row is paid for twice; duplicated inputs with their own ids run"
    assert len(daily) == len(outcome.runs["runner_daily_report"])


def test_the_shard_retry_ran_the_row_whose_attempts_were_used_up(outcome: Outcome) -> None:
    states = outcome.states[outcome.fanout_run]
    flaky_row = next(i for i, t in enumerate(outcome.tickets, start=1) if t["id"] == FLAKY)
    shard = 0 if flaky_row <= 14 else 1 if flaky_row <= 27 else 2
    assert states[("run_shard", shard)] == ("success", 2)
    assert all(states[("run_shard", i)] == ("success", 1) for i in range(3) if i != shard)
    first_try = _task_log(outcome, "runner_batch_fanout", "run_shard", shard, 1)
    assert "1 of 13 row(s) not done (failed 1, invalid 0, not run 0): server_error: 1 (e.g. T-00020" in first_try


def test_no_log_holds_the_key(outcome: Outcome) -> None:
    logs = [p for p in (outcome.deployment.home / "logs").rglob("*") if p.is_file()]
    assert logs
    leaked = [p for p in logs if KEY in p.read_text(errors="replace")]
    assert leaked == []


def test_a_trigger_without_input_path_is_refused(outcome: Outcome) -> None:
    refused = outcome.refused
    assert refused.returncode != 0
    assert "input_path" in refused.stdout + refused.stderr
    assert [r["dag_run_id"] for r in outcome.runs["runner_batch_fanout"]] == [outcome.fanout_run]


def test_connections_test_makes_a_real_request(outcome: Outcome) -> None:
    good, closed = outcome.connection_tests["runner_model_default"], outcome.connection_tests["runner_model_closed"]
    assert good.returncode == 0 and "Connection success!" in good.stdout
    assert closed.returncode == 1 and "Connection failed!" in closed.stdout and "cannot connect" in closed.stdout
    assert sum(1 for r in outcome.requests if r.method == "GET" and r.path == "/v1/models") == 1


def _task_log(outcome: Outcome, dag_id: str, task_id: str, map_index: int, attempt: int) -> str:
    root = outcome.deployment.home / "logs" / f"dag_id={dag_id}"
    found = list(root.glob(f"run_id=*/task_id={task_id}/map_index={map_index}/attempt={attempt}.log"))
    assert found, sorted(str(p) for p in root.rglob("*.log"))
    return "\n".join(p.read_text(errors="replace") for p in found)
