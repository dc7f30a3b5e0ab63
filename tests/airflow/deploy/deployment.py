"""A real Airflow deployment for tests: PostgreSQL metadata DB, LocalExecutor, and separate
``airflow api-server``, ``airflow scheduler``, ``airflow dag-processor`` and ``airflow triggerer``
processes.

The databases are made by ``.ci/airflow_e2e.sh`` (it starts PostgreSQL and passes the URLs in
``RUNNER_AIRFLOW_DEPLOY_DB``, Airflow's, and ``RUNNER_AIRFLOW_DEPLOY_STORE``, the runner's
shared store, reached through the Airflow connection ``runner_store`` named by
``RUNNER_STORE_CONN_ID``). Everything else lives in a temporary directory: AIRFLOW_HOME, the
DAGs folder (the example DAG files copied in, as the README says), the runner package (a
wheel built from this checkout and installed into ``package/``: no process of the deployment
imports the checkout), the runner project (mounted read-only for every Airflow process
when bubblewrap can, as a deployed project on a read-only mount), the worker's local disk
(``state/``: ``RUNNER_STATE_DIR``, the runner's local state) and the shared location
(``shared/``: the fan-out work directory and the run reports, given to the workers as
``local://`` URLs so they go through fsspec as ``s3://`` would). Every process starts in
``/``. Short scheduler and parser intervals keep it quick.
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

from tests.airflow.deploy.worker_user import WorkerUser, exposing_mounts, hand_over, interpreter_paths

REPO = Path(__file__).resolve().parents[3]
SERVICES = ("api-server", "scheduler", "dag-processor", "triggerer")
TERMINAL = {"success", "failed"}


def read_only_mounts_work() -> bool:
    """Whether bubblewrap can give a process a read-only bind mount here."""
    if not shutil.which("bwrap"):
        return False
    probe = ["bwrap", "--dev-bind", "/", "/", "--ro-bind", "/tmp", "/tmp", "true"]
    return subprocess.run(probe, capture_output=True, check=False).returncode == 0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Deployment:
    """One Airflow installation; ``start()`` its services, ``stop()`` them (by their process ids)."""

    def __init__(
        self, base: Path, database_url: str, project: Path, package: Path, user: WorkerUser | None = None
    ) -> None:
        self.base = base
        self.home = base / "airflow"
        self.dags = self.home / "dags"
        self.shared = base / "shared"
        self.work = self.shared / "work"
        self.reports = self.shared / "reports"
        self.state = base / "state"  # the worker's local disk: the runner's local state
        self.package = package  # where the wheel is installed (PYTHONPATH)
        self.project = project
        self.read_only = read_only_mounts_work()
        self.user = user if self.read_only else None  # the user's processes reach the interpreter through bwrap
        self.port = free_port()
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.env = self._environment(database_url, project)
        if self.user is not None:
            self.env.update(self.user.env())
            hand_over(self.user, base, [self.home, self.shared, self.state])
        self.timings: dict[str, float] = {}

    def _environment(self, database_url: str, project: Path) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "RUNNER_", "OPENAI", "PYTEST"))}
        env.update(
            PYTHONPATH=str(self.package),
            PYTHONNOUSERSITE="1",
            AIRFLOW_HOME=str(self.home),
            RUNNER_ROOT=str(project),
            RUNNER_STATE_DIR=str(self.state),
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
            AIRFLOW__TRIGGERER__JOB_HEARTBEAT_SEC="2",  # a restarted triggerer takes over a stopped one's triggers sooner
            AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD="8",
            AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL="5",
            AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL="10",
            AIRFLOW__DAG_PROCESSOR__PARSING_PROCESSES="1",
            AIRFLOW__LOGGING__LOGGING_LEVEL="INFO",
        )
        return env

    # --- the airflow CLI --------------------------------------------------------------

    def mounted(self, *argv: str) -> list[str]:
        """``argv`` started in ``/`` with the project mounted read-only (when bubblewrap can: a
        real read-only mount, which holds for root, unlike permission bits), as the worker
        user when there is one (:mod:`tests.airflow.deploy.worker_user`)."""
        if not self.read_only:
            return list(argv)
        reach = exposing_mounts(interpreter_paths(), [self.base]) if self.user is not None else []
        mount = ["bwrap", "--dev-bind", "/", "/", *reach, "--ro-bind", str(self.project), str(self.project), "--chdir", "/"]
        return [*mount, *(self.user.drop() if self.user is not None else []), *argv]

    def argv(self, *args: str) -> list[str]:
        """``airflow ARGS`` with the deployment's interpreter (and so its Airflow), mounted as :meth:`mounted` says."""
        return self.mounted(sys.executable, "-m", "airflow", *args)

    def airflow(self, *args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """``airflow ARGS`` as a process (the same interpreter and Airflow; the runner from the wheel)."""
        done = subprocess.run(
            self.argv(*args), env=self.env, capture_output=True, text=True, timeout=timeout, check=False, cwd="/"
        )
        if check and done.returncode != 0:
            raise AssertionError(f"airflow {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
        return done

    def install_dags(self) -> None:
        """What the README says: copy the example DAG files (not the package's __init__.py), from the installed package."""
        self.dags.mkdir(parents=True, exist_ok=True)
        for name in ("daily_report.py", "batch_fanout.py", "batch_api.py"):
            shutil.copy(self.package / "runner/airflow/example_dags" / name, self.dags / name)

    # --- the services -------------------------------------------------------------------

    def start(self) -> None:
        (self.home / "service-logs").mkdir(parents=True, exist_ok=True)
        for service in SERVICES:
            self._launch(service)
        self.wait(lambda: self._health() is not None, 180, "the api-server to answer")

    def _launch(self, service: str) -> None:
        with (self.home / "service-logs" / f"{service}.log").open("ab") as log:
            self.processes[service] = subprocess.Popen(
                self.argv(service), env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd="/",
            )  # fmt: skip

    def restart(self, service: str) -> None:
        """Stop ``service`` as a deploy or a crash-free restart does (SIGTERM, it shuts down), start a new one."""
        self._stop([self.processes[service]])
        self._launch(service)

    def stop(self) -> None:
        """SIGTERM each service's process group (the services and their task processes), then SIGKILL."""
        self._stop(list(self.processes.values()))

    @staticmethod
    def _stop(processes: list[subprocess.Popen[bytes]]) -> None:
        for process in processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        for process in processes:
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

    def api(self, path: str, *, method: str = "GET", body: Any = None) -> Any:
        url = f"http://127.0.0.1:{self.port}/api/v2/{path.lstrip('/')}"
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=10) as answer:
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
