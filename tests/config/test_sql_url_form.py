"""The SQL source URL check reads SQLAlchemy's URL form without importing SQLAlchemy: it must
agree with ``sqlalchemy.engine.make_url`` on what is a URL, its driver, password and database."""

from __future__ import annotations

import pytest

from runner.config.sql_sources import _URL

sqlalchemy = pytest.importorskip("sqlalchemy")
from sqlalchemy.engine import make_url  # noqa: E402
from sqlalchemy.exc import ArgumentError  # noqa: E402

URLS = [
    "postgresql+psycopg://reporter@db.internal:5432/sales",
    "postgresql://reporter@db/sales",
    "postgresql+psycopg://reporter:s3cret@db/sales",
    "postgresql+psycopg://:only-password@db/sales",
    "postgresql+psycopg://user:p%40ss@[::1]:5432/sales?sslmode=require",
    "sqlite:///relative.db",
    "sqlite:////abs/path.db",
    "sqlite://",
    "duckdb:///:memory:",
    "duckdb:///data.duckdb",
    "mysql+pymysql://u@h/db?charset=utf8mb4",
    "not a url",
    "://nothing",
    "postgresql+psycopg://u@h:notaport/db",
    "postgresql+psycopg://u@h:/db",
    "http//missing-colon",
    "",
    "postgresql+psycopg://u:pa:ss@h/db",
    "postgresql+psycopg://u@h/db\nmore",
]


@pytest.mark.parametrize("url", URLS)
def test_the_url_form_agrees_with_sqlalchemy(url: str) -> None:
    try:
        expected = make_url(url)
    except (ArgumentError, ValueError):
        expected = None
    found = _URL.fullmatch(url)
    if found is not None and found["port"] is not None and not found["port"].isdigit():
        found = None
    assert (found is None) == (expected is None)
    if expected is not None and found is not None:
        assert found["drivername"] == expected.drivername
        assert bool(found["password"]) == bool(expected.password)
        assert (found["database"] or None) == (expected.database or None)
