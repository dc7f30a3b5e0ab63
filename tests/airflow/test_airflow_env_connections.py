"""Connections the way deployers give them: ``AIRFLOW_CONN_*`` environment variables, in JSON
and URI form, for the model endpoint and the shared store; a URI Airflow cannot parse is
refused with the way to write it, never taken as an empty connection."""

from __future__ import annotations

import json
from urllib.parse import quote

import pytest

from runner.errors import UsageError
from tests.support.services import import_or_missing

import_or_missing("airflow", "apache-airflow is not installed (pip install 'runner[airflow]')")

KEY = "sk-env-canary/+=:@0123456789"  # characters a URI must encode


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (json.dumps({"conn_type": "runner_model", "host": "https://api.example.com/v1", "password": KEY}),
         ("https://api.example.com/v1", KEY)),
        (json.dumps({"conn_type": "runner_model", "host": "127.0.0.1", "port": 8000, "schema": "v1", "password": KEY,
                     "extra": {"scheme": "http"}}), ("http://127.0.0.1:8000/v1", KEY)),
        (f"runner-model://:{quote(KEY, safe='')}@api.example.com/v1", ("https://api.example.com/v1", KEY)),
        (f"runner-model://:{quote(KEY, safe='')}@127.0.0.1:8000/v1?scheme=http", ("http://127.0.0.1:8000/v1", KEY)),
        (f"runner-model://:{quote(KEY, safe='')}@{quote('http://127.0.0.1:8000/v1', safe='')}",
         ("http://127.0.0.1:8000/v1", KEY)),
        (json.dumps({"conn_type": "runner_model", "host": "https://api.example.com/v1"}), ("https://api.example.com/v1", None)),
    ],
    ids=["json-url", "json-parts", "uri", "uri-parts", "uri-encoded-url", "json-no-key"],
)  # fmt: skip
def test_model_connection_from_the_environment(monkeypatch: pytest.MonkeyPatch, value: str, expected: tuple) -> None:
    from runner.airflow.hook import RunnerModelHook

    monkeypatch.setenv("AIRFLOW_CONN_RUNNER_MODEL_DEFAULT", value)
    assert RunnerModelHook().get_conn() == expected


@pytest.mark.parametrize("value", ["runner_model://:sk-x@api.example.com/v1", "api.example.com/v1"])
def test_a_uri_airflow_cannot_parse_is_refused_with_the_way_to_write_it(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    from runner.airflow.hook import RunnerModelHook
    from runner.airflow.operator import fail_without_retry, model_credentials

    monkeypatch.setenv("AIRFLOW_CONN_RUNNER_MODEL_DEFAULT", value)
    with pytest.raises(UsageError, match=r"'runner_model_default' has no type: .*'runner-model://'"):
        RunnerModelHook().get_conn()
    from runner.airflow._compat import AirflowFailException

    with pytest.raises(AirflowFailException, match="runner-model://"), fail_without_retry("runner task 't'"):
        model_credentials("runner_model_default")  # the operator fails without retries, before any call


@pytest.mark.parametrize(
    "value",
    [
        "postgres://runner:{pw}@db.internal:5433/runs?sslmode=require",
        "postgresql://runner:{pw}@db.internal:5433/runs?sslmode=require",
        json.dumps({"conn_type": "postgres", "host": "db.internal", "port": 5433, "login": "runner", "password": "{pw}",
                    "schema": "runs", "extra": {"sslmode": "require"}}),
    ],
    ids=["uri-postgres", "uri-postgresql", "json"],
)  # fmt: skip
def test_store_connection_from_the_environment(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    from runner.airflow.store import shared_store_url

    password = "p@ss/w:rd%"
    encoded = quote(password, safe="")
    monkeypatch.setenv("AIRFLOW_CONN_RUNNER_STORE", value.replace("{pw}", encoded if "://" in value else password))
    monkeypatch.setenv("RUNNER_STORE_CONN_ID", "runner_store")
    assert shared_store_url(None) == f"postgresql://runner:{encoded}@db.internal:5433/runs?sslmode=require"


def test_a_store_connection_of_another_type_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from runner.airflow.store import shared_store_url

    monkeypatch.setenv("AIRFLOW_CONN_RUNNER_STORE", "mysql://runner:pw@db.internal/runs")
    with pytest.raises(UsageError, match="must be a postgres connection"):
        shared_store_url("runner_store")


def test_the_project_root_must_be_absolute(monkeypatch: pytest.MonkeyPatch) -> None:
    from runner.airflow._compat import AirflowFailException
    from runner.airflow.operator import resolve_root

    monkeypatch.setenv("RUNNER_ROOT", "srv/project")
    with pytest.raises(AirflowFailException, match=r"\$RUNNER_ROOT 'srv/project' is a relative path"):
        resolve_root(None)
    with pytest.raises(AirflowFailException, match=r"root= 'project' is a relative path"):
        resolve_root("project")
    monkeypatch.setenv("RUNNER_ROOT", "/srv/project")
    assert resolve_root(None) == "/srv/project"
    monkeypatch.setenv("HOME", "/home/airflow")
    assert resolve_root("~/project") == "/home/airflow/project"
    monkeypatch.delenv("RUNNER_ROOT")
    with pytest.raises(AirflowFailException, match="no runner project root"):
        resolve_root(None)
