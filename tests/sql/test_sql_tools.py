"""load_table with a query and sql_query, on real SQLite and DuckDB databases: read-only,
bound parameters, row caps, timeouts, allow lists, and failures that name the query."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import sqlite3
from pathlib import Path
from typing import Any

import duckdb
import pytest

from runner.errors import ToolFailure
from runner.tools.base import ToolContext, ToolResult
from runner.tools.registry import default_registry
from runner.tools.sql.errors import SqlRefused, SqlSyntaxError
from runner.tools.sql.source import SqlSource, SqlSources

from .conftest import REPO, seed


def call(ctx: ToolContext, tool: str, **arguments: Any) -> ToolResult:
    return asyncio.run(default_registry().invoke(tool, arguments, ctx))


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def databases(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``sales.sqlite`` (seeded by the script) and ``sales.duckdb`` (from the CSV) in one directory."""
    root = tmp_path_factory.mktemp("dbs")
    seed(f"sqlite:///{root / 'sales.sqlite'}")
    with sqlite3.connect(root / "sales.sqlite") as db:
        db.execute("CREATE TABLE secrets (token TEXT)")
        db.execute("INSERT INTO secrets VALUES ('hunter2-hunter2')")
    with duckdb.connect(str(root / "sales.duckdb")) as db:
        db.execute(f"CREATE TABLE sales AS SELECT * FROM read_csv('{REPO / 'examples/data/sales.csv'}')")
        db.execute("CREATE TABLE secrets AS SELECT 'hunter2-hunter2' AS token")
    return root


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "sales.csv").write_bytes((REPO / "examples/data/sales.csv").read_bytes())
    return ws


def context(workspace: Path, root: Path, backend: str, **source: Any) -> ToolContext:
    url = {"sqlite": "sqlite:///sales.sqlite", "duckdb": "duckdb:///sales.duckdb", "files": "duckdb:///:memory:"}[backend]
    files = {"sales": "sales.csv"} if backend == "files" else {}
    spec = SqlSource("shop", url=url, files=files, root=root, where="test", **source)
    return ToolContext(workspace=workspace, sql=SqlSources({"shop": spec}))


BACKENDS = ["sqlite", "duckdb", "files"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_load_table_binds_parameters(workspace: Path, databases: Path, backend: str) -> None:
    ctx = context(workspace, databases, backend)
    result = call(
        ctx, "load_table", name="day",
        query="SELECT region, SUM(revenue) AS revenue FROM sales WHERE date = :day GROUP BY region ORDER BY region",
        params={"day": "2026-11-30"},
    )  # fmt: skip
    assert result.data["rows"] == 5 and result.data["truncated"] is False
    assert "Loaded table 'day' from a query on source 'shop'" in result.content
    # the same figures as pandas on the CSV
    import pandas as pd

    sales = pd.read_csv(workspace / "sales.csv")
    expected = sales[sales["date"] == "2026-11-30"].groupby("region")["revenue"].sum()
    loaded = call(ctx, "query_table", table="day")
    got = {r["region"]: r["revenue"] for r in loaded.data["records"]}
    assert got == pytest.approx(expected.to_dict())


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_injection_attempt_is_only_a_value(workspace: Path, databases: Path, backend: str) -> None:
    ctx = context(workspace, databases, backend)
    hostile = "2026-11-30' OR '1'='1"
    result = call(ctx, "load_table", name="x", query="SELECT * FROM sales WHERE order_id = :id", params={"id": hostile})
    assert result.data["rows"] == 0


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "sql",
    [
        "DELETE FROM sales",
        "delete from sales where 1=1",
        "UPDATE sales SET revenue = 0",
        "INSERT INTO sales (order_id) VALUES ('x')",
        "DROP TABLE sales",
        "CREATE TABLE t (x INT)",
        "CREATE TEMP TABLE t AS SELECT 1",
        "ALTER TABLE sales ADD COLUMN x INT",
        "SELECT 1; DELETE FROM sales",
        "WITH d AS (DELETE FROM sales RETURNING *) SELECT * FROM d",
        "SELECT * INTO copy_of_sales FROM sales",
        "ATTACH 'evil.db' AS evil",
        "PRAGMA query_only = off",
        "VACUUM",
    ],
)
def test_writes_are_refused_and_nothing_changes(workspace: Path, databases: Path, backend: str, sql: str) -> None:
    files = sorted(p.name for p in databases.iterdir())
    before = {name: digest(databases / name) for name in files}
    ctx = context(workspace, databases, backend)
    with pytest.raises(ToolFailure) as refused:
        call(ctx, "sql_query", sql=sql)
    assert "query on source 'shop'" in str(refused.value) and "query: " in str(refused.value)
    assert sorted(p.name for p in databases.iterdir()) == files
    assert {name: digest(databases / name) for name in files} == before
    assert not list(workspace.glob("evil*")) and not list(Path.cwd().glob("evil.db"))


@pytest.mark.parametrize("backend", ["sqlite", "duckdb", "files"])
@pytest.mark.parametrize("sql", ["DELETE FROM sales", "CREATE TEMP TABLE t AS SELECT 1", "ATTACH 'evil.db' AS evil", "PRAGMA query_only = off"])
def test_the_database_refuses_a_write_the_parser_lets_through(
    workspace: Path, databases: Path, backend: str, sql: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second layer: the connection itself is read-only, whatever the first one lets through."""
    from runner.tools.sql import backends as db

    monkeypatch.setattr(db, "check_read_query", lambda *args: None)
    spec = context(workspace, databases, backend).sql.get("shop")
    before = {p.name: digest(p) for p in databases.iterdir()}
    with db.open_backend(spec, str(spec.url), workspace) as database:
        if backend == "sqlite" or "DELETE" in sql or "ATTACH" in sql:
            with pytest.raises(db.SqlError):
                database.query(sql, {}, 10, 5.0)
        else:
            # DuckDB's temporary catalog lives in the connection's memory and ends with it
            with contextlib.suppress(db.SqlError):
                database.query(sql, {}, 10, 5.0)
    assert {p.name: digest(p) for p in databases.iterdir()} == before
    assert not (workspace / "evil.db").exists()


@pytest.mark.parametrize("backend", BACKENDS)
def test_row_cap_cuts_with_a_note(workspace: Path, databases: Path, backend: str) -> None:
    ctx = context(workspace, databases, backend, max_rows=25)
    loaded = call(ctx, "load_table", name="few", query="SELECT * FROM sales")
    assert loaded.data["rows"] == 25 and loaded.data["truncated"] is True
    assert "only the first 25 were loaded" in loaded.content
    shown = call(ctx, "sql_query", sql="SELECT order_id FROM sales")
    assert len(shown.data["records"]) == 25 and shown.data["truncated"] is True
    assert "only the first 25 are shown" in shown.content
    fits = call(ctx, "sql_query", sql="SELECT COUNT(*) AS n FROM sales")
    assert fits.data["truncated"] is False and fits.data["records"] == [{"n": 9712}]


@pytest.mark.parametrize("backend", BACKENDS)
def test_statement_timeout_cancels_the_query(workspace: Path, databases: Path, backend: str) -> None:
    ctx = context(workspace, databases, backend, timeout_seconds=0.5)
    slow = (
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 100000000) SELECT COUNT(*) FROM n"
    )
    with pytest.raises(ToolFailure) as timed_out:
        call(ctx, "sql_query", sql=slow)
    assert "timed out" in str(timed_out.value) and "WITH RECURSIVE" in str(timed_out.value)
    assert call(ctx, "sql_query", sql="SELECT 1 AS one").data["records"] == [{"one": 1}]  # the source still works


@pytest.mark.parametrize("backend", BACKENDS)
def test_syntax_errors_and_unknown_tables_name_the_query(workspace: Path, databases: Path, backend: str) -> None:
    ctx = context(workspace, databases, backend)
    with pytest.raises(ToolFailure) as bad:
        call(ctx, "sql_query", sql="SELEC region FROM sales")
    assert "SELEC region FROM sales" in str(bad.value)
    with pytest.raises(ToolFailure) as missing:
        call(ctx, "sql_query", sql="SELECT nope FROM sales")
    assert "nope" in str(missing.value) and "query: SELECT nope FROM sales" in str(missing.value)
    with pytest.raises(ToolFailure) as unbound:
        call(ctx, "sql_query", sql="SELECT * FROM sales WHERE date = :day")
    assert ":day" in str(unbound.value) and "params" in str(unbound.value)
    with pytest.raises(ToolFailure) as unused:
        call(ctx, "sql_query", sql="SELECT 1 AS x", params={"day": "2026-11-30"})
    assert "not used" in str(unused.value)


@pytest.mark.parametrize("backend", ["sqlite", "duckdb"])  # a files source holds only the tables it declares
def test_allow_list(workspace: Path, databases: Path, backend: str) -> None:
    ctx = context(workspace, databases, backend, allow=("sales",))
    assert call(ctx, "sql_query", sql="SELECT COUNT(*) AS n FROM sales").data["records"] == [{"n": 9712}]
    for sql in (
        "SELECT * FROM secrets",
        "SELECT * FROM main.secrets",
        'SELECT * FROM "secrets"',
        "SELECT * FROM sales JOIN secrets ON 1=1",
        "SELECT (SELECT token FROM secrets) AS t FROM sales",
        "WITH s AS (SELECT * FROM secrets) SELECT * FROM s",
    ):
        with pytest.raises(ToolFailure) as refused:
            call(ctx, "sql_query", sql=sql)
        assert "refused" in str(refused.value) and "secrets" in str(refused.value) and "hunter2" not in str(refused.value)
    # a CTE named like an allowed table is not a way around it either
    with pytest.raises(ToolFailure, match="refused"):
        call(ctx, "sql_query", sql="WITH sales AS (SELECT * FROM secrets) SELECT * FROM sales")
    schema = call(ctx, "sql_query")
    assert "sales" in schema.content and "secrets" not in schema.content


def test_agent_allow_list_narrows_the_source(workspace: Path, databases: Path) -> None:
    ctx = context(workspace, databases, "sqlite")
    ctx = ToolContext(workspace=ctx.workspace, sql=ctx.sql, settings={"sql_query": {"allow": ["secrets"]}})
    with pytest.raises(ToolFailure, match="refused"):
        call(ctx, "sql_query", sql="SELECT COUNT(*) FROM sales")
    assert call(ctx, "sql_query", sql="SELECT COUNT(*) AS n FROM secrets").data["records"] == [{"n": 1}]


def test_duckdb_files_source_cannot_reach_other_files(workspace: Path, databases: Path) -> None:
    ctx = context(workspace, databases, "files")
    for sql in (
        "SELECT * FROM read_csv('/etc/passwd')",
        "SELECT * FROM '/etc/passwd'",
        f"SELECT * FROM read_csv('{workspace / 'sales.csv'}')",
        "COPY sales TO 'out.csv'",
        "INSTALL httpfs",
        "SET enable_external_access = true",
    ):
        with pytest.raises(ToolFailure):
            call(ctx, "sql_query", sql=sql)
    assert sorted(p.name for p in workspace.iterdir()) == ["sales.csv"]


def test_schema_lists_tables_and_columns(workspace: Path, databases: Path) -> None:
    for backend in BACKENDS:
        schema = call(context(workspace, databases, backend), "sql_query")
        assert "sales" in schema.content and "revenue" in schema.content, backend
        assert any(t["table"].endswith("sales") for t in schema.data["tables"])


def test_save_as_feeds_query_table_and_chart(workspace: Path, databases: Path) -> None:
    ctx = context(workspace, databases, "sqlite")
    call(ctx, "sql_query", sql="SELECT date, SUM(revenue) AS revenue FROM sales GROUP BY date ORDER BY date", save_as="daily")
    drawn = call(ctx, "chart", table="daily", kind="line", x="date", y="revenue")
    assert drawn.artifacts == ["charts/daily_line.png"]


def test_sources_and_arguments_mistakes(workspace: Path, databases: Path) -> None:
    ctx = context(workspace, databases, "sqlite")
    with pytest.raises(ToolFailure, match=r"unknown source 'shpo'\. Did you mean 'shop'"):
        call(ctx, "sql_query", sql="SELECT 1", source="shpo")
    with pytest.raises(ToolFailure, match="either path"):
        call(ctx, "load_table", path="sales.csv", query="SELECT 1")
    with pytest.raises(ToolFailure, match="no SQL source"):
        call(ToolContext(workspace=workspace), "sql_query", sql="SELECT 1")
    missing = SqlSource("shop", url="sqlite:///nowhere.sqlite", root=databases, where="t")
    with pytest.raises(ToolFailure, match="no SQLite database"):
        call(ToolContext(workspace=workspace, sql=SqlSources({"shop": missing})), "sql_query", sql="SELECT 1")


def test_password_never_reaches_a_message(workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHOP_DB_PASSWORD", "pw-that-must-not-leak")
    spec = SqlSource("shop", url="postgresql+psycopg://reader@127.0.0.1:1/shop", password_env="SHOP_DB_PASSWORD", where="t")
    ctx = ToolContext(workspace=workspace, sql=SqlSources({"shop": spec}), secrets=("pw-that-must-not-leak",))
    with pytest.raises(ToolFailure) as failed:
        call(ctx, "sql_query", sql="SELECT 1")
    assert "could not run" in str(failed.value) and "pw-that-must-not-leak" not in str(failed.value)
    monkeypatch.delenv("SHOP_DB_PASSWORD")
    with pytest.raises(ToolFailure, match="SHOP_DB_PASSWORD"):
        call(ctx, "sql_query", sql="SELECT 1")


def test_guard_classifies_by_statement_type() -> None:
    from runner.tools.sql.guard import AllowList, check_read_query

    check_read_query("SELECT 1", "postgres")
    check_read_query("WITH a AS (SELECT 1) SELECT * FROM a UNION SELECT 2", "postgres")
    with pytest.raises(SqlSyntaxError):
        check_read_query("  ;  ", "postgres")
    with pytest.raises(SqlRefused, match="2 statements"):
        check_read_query("SELECT 1; SELECT 2", "sqlite")
    allow = (AllowList(("public.sales",), "public", "postgres"),)
    check_read_query("SELECT * FROM Sales", "postgres", allow)  # unquoted names fold to lower case
    with pytest.raises(SqlRefused):
        check_read_query('SELECT * FROM "Sales"', "postgres", allow)
    with pytest.raises(SqlRefused, match="query_to_xml"):
        check_read_query("SELECT query_to_xml('select * from secrets', true, true, '')", "postgres", allow)
    with pytest.raises(SqlRefused, match="names a database"):
        check_read_query("SELECT * FROM other.public.sales", "postgres", allow)


@pytest.mark.parametrize("path", ["../outside.csv", "/etc/passwd", "link.csv", "missing.csv"])
def test_duckdb_files_stay_inside_the_workspace(workspace: Path, databases: Path, path: str) -> None:
    (workspace.parent / "outside.csv").write_text("secret\nhunter2-hunter2\n")
    (workspace / "link.csv").symlink_to(workspace.parent / "outside.csv")
    spec = SqlSource("shop", url="duckdb:///:memory:", files={"t": path}, root=databases, where="t")
    ctx = ToolContext(workspace=workspace, sql=SqlSources({"shop": spec}))
    with pytest.raises(ToolFailure) as refused:
        call(ctx, "sql_query", sql="SELECT * FROM t")
    assert "hunter2" not in str(refused.value) and "could not run" in str(refused.value)


def test_duckdb_reads_parquet_and_csv_files_of_the_workspace(workspace: Path, databases: Path) -> None:
    import pandas as pd

    pd.read_csv(workspace / "sales.csv").to_parquet(workspace / "sales.parquet")
    spec = SqlSource("shop", url="duckdb:///:memory:", files={"p": "sales.parquet", "c": "sales.csv"}, root=databases, where="t")
    ctx = ToolContext(workspace=workspace, sql=SqlSources({"shop": spec}))
    both = call(ctx, "sql_query", sql="SELECT (SELECT SUM(revenue) FROM p) - (SELECT SUM(revenue) FROM c) AS diff, (SELECT COUNT(*) FROM p) AS n")
    (row,) = both.data["records"]
    assert row["n"] == 9712 and abs(row["diff"]) < 1e-6
