"""A source password with an unescaped ``@``, through the real CLI: SQLAlchemy ends the
password at the first ``@``, so its tail became the host name, sent to the resolver and shown
in the error, the store and the report. Now such a URL is refused before it is parsed, naming
the variable and the fix (``%40``), with no part of the password anywhere."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from runner.model.server import ScriptedServer
from runner.tools.sql.source import SqlSource, resolved_url, unencoded_at
from tests.support.project import run_cli, tool_call, write_project

pytestmark = pytest.mark.timeout(180)

TAIL = "tail-of-the-secret-77"
URL = f"postgresql+psycopg://app:hunter2@{TAIL}@127.0.0.1:1/shop"
AGENT = """\
apiVersion: runner/v1
kind: Agent
name: analyst
model: {id: gpt-4o-mini, max_tokens: 100}
tools: [sql_query]
"""


def task(source: str) -> str:
    return (
        "apiVersion: runner/v1\nkind: Task\nname: ask\nagent: analyst\ngoal: Count the sales.\n"
        f"sources:\n  shop: {{{source}, allow: [sales], timeout_seconds: 5}}\n"
        "report: {formats: [markdown, json]}\n"
    )


@pytest.mark.parametrize(("source", "variable"), [
    ("url_env: SHOP_URL", "SHOP_URL"),
    ("airflow_conn_id: shop_conn", "AIRFLOW_CONN_SHOP_CONN"),
])  # fmt: skip
def test_a_password_with_an_unescaped_at_is_refused_and_never_shown(tmp_path: Path, source: str, variable: str) -> None:
    root = write_project(tmp_path / "p", {"agents.d/analyst.yaml": AGENT, "tasks.d/ask.yaml": task(source)})
    rules = [{"times": 1, "reply": tool_call("sql_query", source="shop", sql="SELECT COUNT(*) FROM sales")},
             {"reply": {"content": "I could not count them."}}]  # fmt: skip
    with ScriptedServer({"rules": rules}) as server:
        done = run_cli(root, server, "run", "ask", "--run-id", "at-1", env={variable: URL})
        [seen] = [m["content"] for m in server.requests[-1].body["messages"] if m["role"] == "tool"]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert done.returncode == 0, done.stderr[-2000:]
    assert "has an '@' in its user or password that is not percent-encoded; write it as %40" in seen, seen
    assert variable in seen
    kept = [seen, done.stdout, done.stderr]
    kept += [p.read_text() for p in (root / "reports").rglob("report.*")]
    db = sqlite3.connect(root / ".runner" / "runs.sqlite3")
    for (table,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall():
        kept.append(repr(db.execute(f'SELECT * FROM "{table}"').fetchall()))
    db.close()
    shown = run_cli(root, None, "runs", "show", "at-1", "--transcript", "--json")
    kept.append(shown.stdout)
    for text in kept:
        assert TAIL not in text and "hunter2" not in text


def test_the_forms_that_are_not_ambiguous_still_pass() -> None:
    assert not unencoded_at("sqlite:///data/a@b.db")  # no host: a file path
    assert not unencoded_at("duckdb:///:memory:")
    assert not unencoded_at("postgresql+psycopg://app:hunter2%40tail@db.internal:5432/shop")
    assert not unencoded_at("postgresql+psycopg://app@db.internal/shop?application_name=a@b")
    assert unencoded_at("postgresql+psycopg://app:p@ss:word@db.internal:5432/shop")
    assert unencoded_at("postgresql+psycopg://app:p@a/b@db.internal/shop")  # '/' in the password too


def test_a_password_from_password_env_may_hold_an_at() -> None:
    from sqlalchemy.engine import make_url

    source = SqlSource(name="shop", url="postgresql+psycopg://app@db.internal:5432/shop", password_env="SHOP_PASSWORD")
    url = make_url(resolved_url(source, {}, {"SHOP_PASSWORD": "hunter2@tail:x/y"}))
    assert (url.password, url.host, url.port, url.database) == ("hunter2@tail:x/y", "db.internal", 5432, "shop")


SOURCE_DOCUMENT = "apiVersion: runner/v1\nkind: Source\nname: warehouse\nurl_env: WAREHOUSE_URL\n"


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_validate_refuses_the_url_a_run_would_refuse_at_its_variable_without_showing_it(tmp_path: Path, fmt: str) -> None:
    files = {"agents.d/analyst.yaml": AGENT, "tasks.d/ask.yaml": task("url_env: SHOP_URL"), "sources.d/warehouse.yaml": SOURCE_DOCUMENT}
    root = write_project(tmp_path / "p", files)
    done = run_cli(root, None, "validate", "--format", fmt, env={"SHOP_URL": URL, "WAREHOUSE_URL": URL.replace("shop", "dw")})
    assert done.returncode == 2, done.stdout + done.stderr
    assert TAIL not in done.stdout + done.stderr and "hunter2" not in done.stdout + done.stderr
    said = "has an '@' in its user or password that is not percent-encoded (value hidden); write it as %40"
    if fmt == "text":
        lines = [line for line in done.stdout.splitlines() if said in line]
        assert sorted(line.split(": error: ")[0] for line in lines) == ["sources.d/warehouse.yaml:4:10", "tasks.d/ask.yaml:7:19"]
        assert all("the URL in SHOP_URL" in line or "the URL in WAREHOUSE_URL" in line for line in lines)
    else:
        import json

        found = {(p["file"], p["pointer"]) for p in json.loads(done.stdout)["problems"] if said in p["message"]}
        assert found == {("sources.d/warehouse.yaml", "/url_env"), ("tasks.d/ask.yaml", "/sources/shop/url_env")}


def test_validate_says_nothing_of_a_url_that_is_well_formed_or_not_set(tmp_path: Path) -> None:
    root = write_project(tmp_path / "p", {"agents.d/analyst.yaml": AGENT, "tasks.d/ask.yaml": task("airflow_conn_id: shop_conn")})
    assert run_cli(root, None, "validate").returncode == 0
    encoded = URL.replace(f"hunter2@{TAIL}", f"hunter2%40{TAIL}")
    done = run_cli(root, None, "validate", env={"AIRFLOW_CONN_SHOP_CONN": encoded})
    assert done.returncode == 0, done.stdout + done.stderr
    refused = run_cli(root, None, "validate", env={"AIRFLOW_CONN_SHOP_CONN": URL})
    assert refused.returncode == 2 and "the URL in AIRFLOW_CONN_SHOP_CONN has an '@'" in refused.stdout
    assert "/sources/shop/airflow_conn_id" in refused.stdout and TAIL not in refused.stdout
