"""The daily report from a real PostgreSQL seeded by scripts/seed_sales_db.py.

The database is the one .ci/sql_e2e.sh seeds (``RUNNER_TEST_SALES_DB_URL``, the reader's URL
without its password, and ``RUNNER_TEST_SALES_DB_PASSWORD``), else a fresh database on the
private cluster of :mod:`tests.postgres`, seeded here by the same script. Without PostgreSQL
these tests are skipped with the reason.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runner.model.server import ScriptedServer

from .conftest import report_json, run_cli, seed, write
from .test_sql_cli import figures, run_report, tool_call

pytestmark = pytest.mark.postgres


class SalesDb:
    """The seeded database: the reader's URL (no password in it) and the reader's password."""

    def __init__(self, url: str, password: str):
        self.url, self.password = url, password

    def reader_url(self) -> str:
        from sqlalchemy.engine import make_url

        return make_url(self.url).set(password=self.password).render_as_string(hide_password=False)

    def totals(self) -> tuple[Any, ...]:
        import psycopg

        with psycopg.connect(_libpq(self.reader_url())) as db:
            row = db.execute("SELECT COUNT(*), SUM(revenue), MAX(line) FROM sales").fetchone()
        assert row is not None
        return tuple(row)


@pytest.fixture
def sales_db(request: pytest.FixtureRequest) -> Iterator[SalesDb]:
    url, password = os.environ.get("RUNNER_TEST_SALES_DB_URL", ""), os.environ.get("RUNNER_TEST_SALES_DB_PASSWORD", "")
    if url and password:
        yield SalesDb(url, password)
        return
    import psycopg
    from sqlalchemy.engine import make_url

    database = request.getfixturevalue("postgres_url")  # a fresh database (tests/postgres.py)
    admin = str(make_url(database).set(drivername="postgresql+psycopg").render_as_string(hide_password=False))
    reader, password = f"sales_reader_{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    seed(admin, "--reader", reader, "--reader-password-env", "READER_PASSWORD", env={"READER_PASSWORD": password})
    try:
        yield SalesDb(str(make_url(admin).set(username=reader)), password)
    finally:
        with psycopg.connect(_libpq(admin), autocommit=True) as db:
            db.execute(f'DROP OWNED BY "{reader}"')
            db.execute(f'DROP ROLE "{reader}"')


def _libpq(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


def test_daily_report_from_postgres_has_the_csv_runs_figures(project: Path, sales_db: SalesDb) -> None:
    csv_run = run_report(project, "daily_report")
    pg_run = run_report(project, "daily_report_pg", SALES_DB_URL=sales_db.reader_url())
    assert figures(pg_run) == figures(csv_run)
    load = next(s for s in pg_run["steps"] if s["id"] == "load")
    csv_load = next(s for s in csv_run["steps"] if s["id"] == "load")
    assert load["data"]["source"] == "sales_db"
    assert load["data"]["dtypes"] == csv_load["data"]["dtypes"]  # dates as text, money as floats: like the CSV
    for path in [*project.joinpath("reports").rglob("*"), *project.joinpath(".runner").glob("runs.sqlite3*")]:
        if path.is_file():
            assert sales_db.password.encode() not in path.read_bytes(), path


def test_agent_cannot_change_postgres_through_sql_query(project: Path, sales_db: SalesDb) -> None:
    write(project / "agents.d" / "pg_analyst.yaml", """\
apiVersion: runner/v1
kind: Agent
name: pg_analyst
model: {id: gpt-4o-mini, max_tokens: 200}
tools: [{name: sql_query, settings: {max_rows: 5, timeout_seconds: 1}}]
caps: {max_steps: 12}
""")
    write(project / "tasks.d" / "pg_question.yaml", f"""\
apiVersion: runner/v1
kind: Task
name: pg_question
sources:
  shop: {{url: "{sales_db.url}", password_env: SHOP_DB_PASSWORD, allow: [public.sales]}}
agent: pg_analyst
goal: How many order lines are there?
""")
    before = sales_db.totals()
    attempts = [
        "DELETE FROM sales",
        "SELECT 1; COMMIT; DELETE FROM sales",
        "WITH gone AS (DELETE FROM sales RETURNING *) SELECT COUNT(*) FROM gone",
        "SET default_transaction_read_only = off",
        "TRUNCATE sales",
        "SELECT * FROM pg_catalog.pg_authid",
        "SELECT pg_sleep(5)",
    ]
    rules = [{"times": 1, "reply": tool_call("sql_query", sql=sql)} for sql in attempts]
    rules += [
        {"times": 1, "reply": tool_call("sql_query", sql="SELECT region, COUNT(*) AS n FROM sales GROUP BY region")},
        {"reply": "Done."},
    ]
    with ScriptedServer({"rules": rules}) as server:
        result = run_cli(project, server, "run", "pg_question", env={"SHOP_DB_PASSWORD": sales_db.password})
        seen = [m["content"] for m in server.requests[-1].body["messages"] if m["role"] == "tool"]
    assert result.returncode == 0, result.stderr
    assert len(seen) == len(attempts) + 1
    for sql, message in zip(attempts, seen, strict=False):
        assert "query on source 'shop'" in message and sql[:20] in message, message
        assert ("refused" in message) or ("timed out" in message and "pg_sleep" in sql), message
    assert "5 row(s)" in seen[-1]
    assert sales_db.totals() == before
    assert sales_db.password not in result.stdout + result.stderr
    record = report_json(project, "pg_question")
    assert sales_db.password not in str(record)


def test_the_reader_role_itself_cannot_write(sales_db: SalesDb) -> None:
    """The seed script's role: even a client that skips every runner check cannot write."""
    import psycopg

    with psycopg.connect(_libpq(sales_db.reader_url()), autocommit=True) as db:
        db.execute("SET default_transaction_read_only = off")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            db.execute("DELETE FROM sales")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            db.execute("CREATE TABLE public.mine (x int)")
