"""The shared store under Airflow: an Airflow connection (or the environment) names the
PostgreSQL database, and the URL built from it reaches a real one."""

from __future__ import annotations

import json
from urllib.parse import parse_qs, unquote, urlsplit

import pytest

from runner.errors import UsageError
from runner.store.runstore import RunStore
from tests.support.services import import_or_missing

import_or_missing("airflow", "apache-airflow is not installed (pip install 'runner[airflow]')")


def _connection(monkeypatch: pytest.MonkeyPatch, name: str, url: str, password: str | None = None) -> None:
    parts = urlsplit(url)
    socket = parse_qs(parts.query).get("host", [parts.hostname])[0]
    fields = {"conn_type": "postgres", "host": socket, "login": parts.username, "schema": parts.path.lstrip("/"),
              "password": password}  # fmt: skip
    monkeypatch.setenv(f"AIRFLOW_CONN_{name.upper()}", json.dumps({k: v for k, v in fields.items() if v is not None}))


def test_a_postgres_connection_reaches_the_store(monkeypatch: pytest.MonkeyPatch, postgres_url: str) -> None:
    from runner.airflow.store import shared_store_url

    _connection(monkeypatch, "runner_store", postgres_url)
    url = shared_store_url("runner_store")
    assert url is not None and url.startswith("postgresql://runner@%2F")
    store = RunStore(url)
    try:
        assert store.start_run("r", "t", {}, "h", {}) == 1
    finally:
        store.close()
    monkeypatch.setenv("RUNNER_STORE_CONN_ID", "runner_store")
    assert shared_store_url(None) == url  # the environment names the connection when the operator does not


def test_the_url_keeps_odd_passwords_and_extras(monkeypatch: pytest.MonkeyPatch) -> None:
    from runner.airflow.store import postgres_url

    url = postgres_url("db.internal", 5433, "runner", "p@ss:w/rd?#", "runner", {"sslmode": "require", "ignored": {}})
    parts = urlsplit(url)
    assert (parts.hostname, parts.port, unquote(parts.password or ""), parts.path) == ("db.internal", 5433, "p@ss:w/rd?#", "/runner")
    assert parse_qs(parts.query) == {"sslmode": ["require"]}
    with pytest.raises(UsageError, match="no host"):
        postgres_url(None, None, "u", "p", "d", {})


def test_without_a_connection_the_environment_or_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    from runner.airflow.store import shared_store_url

    assert shared_store_url(None) is None  # SQLite files under $RUNNER_ROOT/.runner
    monkeypatch.setenv("RUNNER_STORE_URL", "postgresql://runner@db/runner")
    assert shared_store_url(None) == "postgresql://runner@db/runner"
    with pytest.raises(UsageError, match="'nope' is not defined"):
        shared_store_url("nope")
