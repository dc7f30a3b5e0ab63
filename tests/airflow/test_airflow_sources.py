"""SQL sources given as Airflow connections (airflow_conn_id): resolved through Airflow, the
password masked, and a delivery failure retried by Airflow."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.services import import_or_missing

import_or_missing("airflow", "apache-airflow is not installed (pip install 'runner[airflow]')")

PASSWORD = "pg-pass-from-airflow-1234"


def project(tmp_path: Path) -> Path:
    (tmp_path / "tasks.d").mkdir()
    (tmp_path / "tasks.d" / "q.yaml").write_text("""\
apiVersion: runner/v1
kind: Task
name: q
sources:
  sales_db: {airflow_conn_id: sales_db, allow: [public.sales]}
  local: {url: "sqlite:///x.sqlite"}
pipeline:
  steps:
    - {id: load, tool: load_table, args: {source: sales_db, query: "SELECT 1 AS one"}}
""")
    return tmp_path


def test_connection_becomes_a_sqlalchemy_url_and_its_password_is_masked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from runner.airflow import sql_connections as sources

    masked: list[Any] = []
    monkeypatch.setattr("airflow.sdk.log.mask_secret", lambda value, name=None: masked.append(value))
    monkeypatch.setenv("AIRFLOW_CONN_SALES_DB", f"postgres://reader:{PASSWORD}@db.internal:5432/sales")
    urls = sources.source_urls(project(tmp_path), "q")
    assert set(urls) == {"sales_db"}  # only the sources named by connection
    assert PASSWORD in masked

    from runner.tools.sql.source import SqlSource, resolved_url

    spec = SqlSource("sales_db", airflow_conn_id="sales_db")
    assert resolved_url(spec, urls) == f"postgresql+psycopg://reader:{PASSWORD}@db.internal:5432/sales"
    # outside Airflow, the same connection comes from Airflow's own variable
    assert resolved_url(spec, {}) == f"postgresql+psycopg://reader:{PASSWORD}@db.internal:5432/sales"


def test_a_failed_delivery_fails_the_try_so_airflow_retries_it() -> None:
    from airflow.sdk.exceptions import AirflowException, AirflowFailException

    from runner.airflow.operator import check_status

    with pytest.raises(AirflowException) as caught:
        check_status({"run_id": "r", "status": "completed", "exit_code": 5}, ("capped",))
    assert not isinstance(caught.value, AirflowFailException)  # retried: a retry re-delivers only what failed
    assert "delivery" in str(caught.value)
    check_status({"run_id": "r", "status": "completed", "exit_code": 0}, ("capped",))
