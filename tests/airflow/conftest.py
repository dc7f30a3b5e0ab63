"""Fixtures for the Airflow provider tests.

Airflow reads its configuration when ``airflow`` is first imported, so the environment is set
here, at conftest import -- before any test module imports Airflow: a throw-away
``AIRFLOW_HOME`` (SQLite metadata DB inside it), no example DAGs, and two local DAG bundles
(the shipped example DAGs and ``tests/airflow/dags``) so that ``dag.test()`` can find and
serialize the DAGs it runs. The metadata DB is created once per session by the
``airflow_db`` fixture (in process, ~2-7 s), only when a test that runs ``dag.test()`` needs it.

Nothing here imports Airflow at module level, so the Airflow-free tests in this directory
(shards, run ids) also run where Airflow is not installed.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import runner.airflow
from runner import api
from runner.model.server import ScriptedServer
from tests.support.project import copy_project
from tests.support.services import import_or_missing

HERE = Path(__file__).resolve().parent
TEST_DAGS = HERE / "dags"
TEST_PROJECT = HERE / "project"
EXAMPLE_DAGS = Path(runner.airflow.__file__).resolve().parent / "example_dags"
CANARY_KEY = "sk-airflow-canary-0123456789abcdef"


def _configure_airflow_environment() -> Path:
    # One home per process: pytest-xdist's workers inherit the environment of the process that
    # started them, so the marker names the worker (each gets its own metadata database).
    marker = f"RUNNER_TEST_AIRFLOW_HOME_{os.environ.get('PYTEST_XDIST_WORKER', 'main')}"
    if os.environ.get(marker):  # this module imported twice: keep the first home
        return Path(os.environ[marker])
    if "airflow" in sys.modules:  # pragma: no cover - another conftest imported Airflow first
        warnings.warn("airflow was imported before tests/airflow/conftest.py could set AIRFLOW_HOME", stacklevel=1)
    home = Path(tempfile.mkdtemp(prefix="runner-airflow-home-"))
    atexit.register(shutil.rmtree, home, ignore_errors=True)
    bundles = [
        {"name": "runner-example-dags", "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle",
         "kwargs": {"path": str(EXAMPLE_DAGS), "refresh_interval": 0}},
        {"name": "runner-test-dags", "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle",
         "kwargs": {"path": str(TEST_DAGS), "refresh_interval": 0}},
    ]  # fmt: skip
    os.environ.update(
        {
            "AIRFLOW_HOME": str(home),
            marker: str(home),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_FOLDER": str(TEST_DAGS),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
            "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST": json.dumps(bundles),
            "AIRFLOW__CORE__ALLOWED_DESERIALIZATION_CLASSES": "airflow.* runner.*",
            "RUNNER_AIRFLOW_WORK_DIR": str(home / "work"),
        }
    )
    for name in list(os.environ):
        if name.startswith("AIRFLOW_CONN_"):
            del os.environ[name]
    return home


AIRFLOW_HOME = _configure_airflow_environment()


@pytest.fixture(scope="session")
def airflow_db() -> float:
    """Create the SQLite metadata DB once per session (what ``airflow db migrate`` does); its duration."""
    import_or_missing("airflow", "apache-airflow is not installed (pip install 'runner[airflow]')")
    from airflow.utils.db import initdb

    started = time.monotonic()
    with warnings.catch_warnings():  # Airflow 3.1 imports its own deprecated modules while creating tables
        warnings.simplefilter("ignore")
        initdb()
    return time.monotonic() - started


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of tests/airflow/project (its run store and reports land in the copy); $RUNNER_ROOT points at it."""
    root = copy_project(TEST_PROJECT, tmp_path / "project")
    monkeypatch.setenv("RUNNER_ROOT", str(root))
    monkeypatch.setenv("RUNNER_AIRFLOW_WORK_DIR", str(tmp_path / "work"))
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    return root


@pytest.fixture
def scripted_server() -> Iterator[Any]:
    """A factory: ``with scripted_server(script) as srv`` (the loopback model server)."""
    return ScriptedServer


@pytest.fixture(scope="session")
def test_dags() -> Any:
    """The module tests/airflow/dags/runner_test_dags.py (it defines retry_dag and mapped_dag)."""
    import_or_missing("airflow", "apache-airflow is not installed (pip install 'runner[airflow]')")
    import importlib.util

    name = "runner_test_dags"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, TEST_DAGS / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


@pytest.fixture
def canary_key() -> str:
    """An API key that must never show up in logs, XCom or manifests."""
    return CANARY_KEY


@pytest.fixture
def model_connection(monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    """``model_connection(base_url)`` defines ``runner_model_default`` through the environment (JSON form)."""

    def define(base_url: str, key: str = CANARY_KEY, conn_id: str = "runner_model_default") -> None:
        value = json.dumps({"conn_type": "runner_model", "host": base_url, "password": key})
        monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", value)

    return define


@pytest.fixture
def require_api() -> Callable[[str], Any]:
    """``require_api("run_batch")``: the function of :mod:`runner.api` (an ``AttributeError``
    fails the test when it is gone: our own API is never a reason to skip)."""
    return lambda name: getattr(api, name)
