"""A real Airflow deployment for tests: PostgreSQL metadata DB, LocalExecutor, and separate
``airflow api-server``, ``airflow scheduler``, ``airflow dag-processor`` and ``airflow triggerer``
processes.

The databases are made by ``.ci/airflow_e2e.sh`` (it starts PostgreSQL and passes the URLs in
``RUNNER_AIRFLOW_DEPLOY_DB``, Airflow's, and ``RUNNER_AIRFLOW_DEPLOY_STORE``, the runner's
shared store, reached through the Airflow connection ``runner_store`` named by
``RUNNER_STORE_CONN_ID``). Everything else lives in a temporary directory: AIRFLOW_HOME, the
DAGs folder (the example DAG files copied in, as the README says), the runner project (the
workers' local disk) and the shared location (``shared/``: the fan-out work directory and
the run reports, given to the workers as ``local://`` URLs so they go through fsspec as
``s3://`` would). Short scheduler and parser intervals keep it quick.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import runner.airflow

REPO = Path(__file__).resolve().parents[3]
EXAMPLE_DAGS = Path(runner.airflow.__file__).resolve().parent / "example_dags"
SERVICES = ("api-server", "scheduler", "dag-processor", "triggerer")
TERMINAL = {"success", "failed"}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Deployment:
    """One Airflow installation; ``start()`` its services, ``stop()`` them (by their process ids)."""

    def __init__(self, base: Path, database_url: str, project: Path) -> None:
        self.home = base / "airflow"
        self.dags = self.home / "dags"
        self.shared = base / "shared"
        self.work = self.shared / "work"
        self.reports = self.shared / "reports"
        self.port = free_port()
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.env = self._environment(database_url, project)
        self.timings: dict[str, float] = {}

    def _environment(self, database_url: str, project: Path) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "RUNNER_", "OPENAI", "PYTEST"))}
        env.update(
            PYTHONPATH=str(REPO),
            AIRFLOW_HOME=str(self.home),
            RUNNER_ROOT=str(project),
            RUNNER_AIRFLOW_WORK_DIR=f"local://{self.work}",
            RUNNER_REPORTS_DIR=f"local://{self.reports}",
            RUNNER_STORE_CONN_ID="runner_store",
            AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=database_url,
            AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_ASYNC=database_url,  # psycopg 3 does async too (else: asyncpg)
            AIRFLOW__CORE__EXECUTOR="LocalExecutor",
            AIRFLOW__CORE__DAGS_FOLDER=str(self.dags),
            AIRFLOW__CORE__LOAD_EXAMPLES="False",
            AIRFLOW__CORE__TEST_CONNECTION="Enabled",
            AIRFLOW__CORE__PARALLELISM="8",
            AIRFLOW__CORE__EXECUTION_API_SERVER_URL=f"http://127.0.0.1:{self.port}/execution/",
            AIRFLOW__API__HOST="127.0.0.1",
            AIRFLOW__API__PORT=str(self.port),
            AIRFLOW__API__WORKERS="1",
            AIRFLOW__API_AUTH__JWT_SECRET=secrets.token_hex(32),
            AIRFLOW__API__SECRET_KEY=secrets.token_hex(32),
            AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS="True",  # the REST polling below needs no login
            AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME="0.5",
            AIRFLOW__SCHEDULER__JOB_HEARTBEAT_SEC="2",
            AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC="2",
            AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL="5",
            AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL="10",
            AIRFLOW__DAG_PROCESSOR__PARSING_PROCESSES="1",
            AIRFLOW__LOGGING__LOGGING_LEVEL="INFO",
        )
        return env

    # --- the airflow CLI --------------------------------------------------------------

    def airflow(self, *args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """``airflow ARGS`` as a process (the same interpreter, so the same Airflow and runner)."""
        argv = [sys.executable, "-m", "airflow", *args]
        done = subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=timeout, check=False)
        if check and done.returncode != 0:
            raise AssertionError(f"airflow {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
        return done

    def install_dags(self) -> None:
        """What the README says: copy the example DAG files (not the package's __init__.py)."""
        self.dags.mkdir(parents=True, exist_ok=True)
        for name in ("daily_report.py", "batch_fanout.py", "batch_api.py"):
            shutil.copy(EXAMPLE_DAGS / name, self.dags / name)

    # --- the services -------------------------------------------------------------------

    def start(self) -> None:
        logs = self.home / "service-logs"
        logs.mkdir(parents=True, exist_ok=True)
        for service in SERVICES:
            with (logs / f"{service}.log").open("wb") as log:
                self.processes[service] = subprocess.Popen(
                    [sys.executable, "-m", "airflow", service], env=self.env, stdout=log, stderr=subprocess.STDOUT,
                    start_new_session=True,
                )  # fmt: skip
        self.wait(lambda: self._health() is not None, 180, "the api-server to answer")

    def stop(self) -> None:
        """SIGTERM each service's process group (the services and their task processes), then SIGKILL."""
        for process in self.processes.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        for process in self.processes.values():
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()

    def service_log(self, service: str) -> str:
        return (self.home / "service-logs" / f"{service}.log").read_text(errors="replace")

    def check_alive(self) -> None:
        for service, process in self.processes.items():
            if process.poll() is not None:
                raise AssertionError(f"airflow {service} exited {process.returncode}:\n{self.service_log(service)[-4000:]}")

    # --- the REST API ------------------------------------------------------------------

    def api(self, path: str) -> Any:
        url = f"http://127.0.0.1:{self.port}/api/v2/{path.lstrip('/')}"
        with urllib.request.urlopen(url, timeout=10) as answer:
            return json.load(answer)

    def _health(self) -> Any:
        try:
            return self.api("monitor/health")
        except OSError:
            return None

    def add_store_connection(self, store_url: str) -> None:
        """The runner's shared store as an Airflow connection of type postgres (what a deployment defines)."""
        parts = urlsplit(store_url)
        self.airflow(
            "connections", "add", "runner_store", "--conn-type", "postgres", "--conn-host", str(parts.hostname),
            "--conn-port", str(parts.port or 5432), "--conn-login", unquote(parts.username or ""),
            "--conn-password", unquote(parts.password or ""), "--conn-schema", parts.path.lstrip("/"),
        )  # fmt: skip

    def runs(self, dag_id: str) -> list[dict[str, Any]]:
        return list(self.api(f"dags/{dag_id}/dagRuns?limit=100")["dag_runs"])

    def task_states(self, dag_id: str, run_id: str) -> dict[tuple[str, int], tuple[str, int]]:
        """``{(task_id, map_index): (state, try_number)}`` of one dag run."""
        found = self.api(f"dags/{dag_id}/dagRuns/{run_id}/taskInstances?limit=100")["task_instances"]
        return {(ti["task_id"], ti["map_index"]): (ti["state"], ti["try_number"]) for ti in found}

    def wait_for_run(self, dag_id: str, run_id: str, timeout: float) -> str:
        state: dict[str, str] = {}

        def finished() -> bool:
            state["now"] = self.api(f"dags/{dag_id}/dagRuns/{run_id}")["state"]
            return state["now"] in TERMINAL

        self.wait(finished, timeout, f"{dag_id} run {run_id} to finish")
        return state["now"]

    def wait(self, condition: Callable[[], bool], timeout: float, what: str) -> None:
        """Poll ``condition`` every half second; fail naming ``what`` (and the services' logs) on timeout."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check_alive()
            if condition():
                return
            time.sleep(0.5)
        tails = "\n".join(f"--- {s} ---\n{self.service_log(s)[-3000:]}" for s in SERVICES)
        raise AssertionError(f"timed out after {timeout:g}s waiting for {what}\n{tails}")

    def timed(self, phase: str, started: float) -> None:
        self.timings[phase] = round(time.monotonic() - started, 1)
