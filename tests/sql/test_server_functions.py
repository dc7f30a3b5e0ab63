"""Server-side functions through the real CLI: a source with ``allow: [public.sales]`` on a
superuser account refuses to read the server's files, settings and large objects
(``pg_read_file``, ``pg_stat_file``, ``current_setting``, ``lo_import``, ``pg_ls_dir``,
``dblink``, ``COPY ... PROGRAM``), however the call is spelled; ``runner validate --sources``
says the account can read server files. SQLite and DuckDB refuse the same families."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runner.model.server import ScriptedServer
from runner.tools.sql.errors import SqlRefused
from runner.tools.sql.guard import check_read_query

from .conftest import run_cli, seed, write
from .test_sql_cli import sqlite_task, tool_call

ATTEMPTS = [
    "SELECT pg_read_file('/etc/passwd') FROM public.sales",
    "SELECT pg_catalog.pg_read_binary_file('/etc/passwd')",
    'SELECT "pg_read_file"(\'/etc/passwd\') FROM sales',
    "SELECT PG_STAT_FILE('/etc/passwd')",
    "SELECT current_setting('data_directory')",
    "SELECT set_config('default_transaction_read_only', 'off', false)",
    "SELECT lo_import('/etc/passwd')",
    "SELECT * FROM pg_ls_dir('.')",
    "SELECT * FROM dblink('dbname=postgres', 'SELECT 1') AS t(a int)",
    "COPY (SELECT 1) TO PROGRAM 'id'",
    "SELECT name, setting FROM pg_settings",
    "SELECT pg_terminate_backend(1)",
    "SELECT pg_read_file('/etc/passwd') FROM sales WHERE region = $$",  # cannot be parsed: found in the text
]


@pytest.mark.parametrize("sql", ATTEMPTS)
@pytest.mark.parametrize("dialect", ["postgres", "sqlite", "duckdb"])
def test_the_guard_refuses_server_functions_with_or_without_an_allow_list(sql: str, dialect: str) -> None:
    with pytest.raises(SqlRefused):
        check_read_query(sql, dialect)


@pytest.mark.parametrize("sql", [
    "SELECT region, SUM(revenue) FROM sales GROUP BY region", "SELECT lower(region), version() FROM sales",
    "SELECT region AS lo_region, COUNT(*) AS pg_read_count FROM sales GROUP BY region",
])  # fmt: skip
def test_ordinary_queries_and_look_alike_column_names_pass(sql: str) -> None:
    check_read_query(sql, "postgres")


def test_sqlite_source_refuses_file_functions(project: Path, sales_sqlite: Path) -> None:
    sqlite_task(project, sales_sqlite)
    attempts = ["SELECT load_extension('/tmp/x.so')", "SELECT readfile('/etc/passwd')", "SELECT fts3_tokenizer('simple')"]
    rules = [{"times": 1, "reply": tool_call("sql_query", sql=sql)} for sql in attempts] + [{"reply": "Done."}]
    with ScriptedServer({"rules": rules}) as server:
        result = run_cli(project, server, "run", "db_question")
        seen = [m["content"] for m in server.requests[-1].body["messages"] if m["role"] == "tool"]
    assert result.returncode == 0, result.stderr
    assert len(seen) == len(attempts) and all("reaches the server itself" in m for m in seen), seen


@pytest.mark.postgres
def test_a_superuser_source_cannot_read_server_files_and_validate_says_so(project: Path, postgres_url: str) -> None:
    from sqlalchemy.engine import make_url

    admin = make_url(postgres_url).set(drivername="postgresql+psycopg").render_as_string(hide_password=False)
    seed(admin)  # the sales table, on the cluster's superuser
    write(project / "agents.d" / "pg_analyst.yaml", """\
apiVersion: runner/v1
kind: Agent
name: pg_analyst
model: {id: gpt-4o-mini, max_tokens: 200}
tools: [sql_query]
caps: {max_steps: 20}
""")
    write(project / "tasks.d" / "pg_question.yaml", f"""\
apiVersion: runner/v1
kind: Task
name: pg_question
sources:
  shop: {{url: "{admin}", allow: [public.sales], timeout_seconds: 5}}
agent: pg_analyst
goal: How many order lines are there?
""")
    rules = [{"times": 1, "reply": tool_call("sql_query", sql=sql)} for sql in ATTEMPTS]
    rules += [{"times": 1, "reply": tool_call("sql_query", sql="SELECT COUNT(*) AS n FROM sales")}, {"reply": "Done."}]
    with ScriptedServer({"rules": rules}) as server:
        result = run_cli(project, server, "run", "pg_question")
        seen = [m["content"] for m in server.requests[-1].body["messages"] if m["role"] == "tool"]
    assert result.returncode == 0, result.stderr
    assert len(seen) == len(ATTEMPTS) + 1
    for sql, message in zip(ATTEMPTS, seen, strict=False):
        assert "refused" in message and "root:" not in message, (sql, message)
    assert "1 row(s)" in seen[-1] or '"n"' in seen[-1]
    validated = run_cli(project, None, "validate", "--sources", "--format", "json")
    assert validated.returncode == 0, validated.stdout + validated.stderr  # a warning, not an error
    (warning,) = [p for p in json.loads(validated.stdout)["problems"] if "shop" in p["message"]]
    assert warning["severity"] == "warning" and "can read the server's files (superuser" in warning["message"]
    assert warning["file"].endswith("pg_question.yaml")
    plain = run_cli(project, None, "validate")
    assert plain.returncode == 0 and "server's files" not in plain.stdout  # validate alone connects to nothing
