"""Through the real CLI: the daily report read with SQL gives the CSV run's figures, and an
agent cannot change the data through sql_query. SQLite and DuckDB here; PostgreSQL in
test_postgres.py (run by .ci/sql_e2e.sh)."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path
from typing import Any

from runner.model.server import ScriptedServer

from .conftest import CANARY, report_json, run_cli, write

DAY = "2026-11-30"


def figures(record: dict[str, Any]) -> dict[str, Any]:
    """Every table of the report, as it would be read: rows of the tables, plus the charts drawn."""
    return {
        "tables": record["tables"],
        "charts": sorted(Path(a["path"]).name for a in record["artifacts"]),
        "day": record["steps"][[s["id"] for s in record["steps"]].index("day_totals")]["data"]["records"],
    }


def run_report(project: Path, task: str, **env: str) -> dict[str, Any]:
    with ScriptedServer({"fallback": "Revenue was steady."}) as server:
        result = run_cli(project, server, "run", task, "--input", f"date={DAY}", env=env)
    assert result.returncode == 0, result.stderr
    return report_json(project, task)


def test_duckdb_over_the_csv_gives_the_csv_runs_figures(project: Path) -> None:
    csv_run = run_report(project, "daily_report")
    sql_run = run_report(project, "daily_report_duckdb")
    assert figures(sql_run) == figures(csv_run)
    load = next(s for s in sql_run["steps"] if s["id"] == "load")
    assert load["data"]["source"] == "sales_db" and load["data"]["truncated"] is False
    import pandas as pd

    sales = pd.read_csv(project / "examples/data/sales.csv")
    window = sales[(sales["date"] >= "2026-11-03") & (sales["date"] <= DAY)]
    assert load["data"]["rows"] == len(window) < len(sales)  # the 28 days the report reads, bound as parameters


def sqlite_task(project: Path, db: Path, agent_tools: str = "[sql_query]") -> None:
    write(project / "agents.d" / "db_analyst.yaml", f"""\
apiVersion: runner/v1
kind: Agent
name: db_analyst
model: {{id: gpt-4o-mini, max_tokens: 200}}
system_prompt: Answer from the database.
tools: {agent_tools}
caps: {{max_steps: 8}}
""")
    write(project / "tasks.d" / "db_question.yaml", f"""\
apiVersion: runner/v1
kind: Task
name: db_question
sources:
  shop: {{url: "sqlite:///{db}", allow: [sales], timeout_seconds: 5}}
agent: db_analyst
goal: How many order lines are there?
""")


def tool_call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def test_agent_delete_through_sql_query_is_refused_and_data_unchanged(project: Path, sales_sqlite: Path) -> None:
    sqlite_task(project, sales_sqlite)
    before = hashlib.sha256(sales_sqlite.read_bytes()).hexdigest()
    attempts = [
        "DELETE FROM sales",
        "DROP TABLE sales",
        "UPDATE sales SET revenue = 0",
        "SELECT 1; DELETE FROM sales",
        "ATTACH 'stolen.db' AS stolen",
    ]
    rules = [{"times": 1, "reply": tool_call("sql_query", sql=sql)} for sql in attempts]
    rules += [
        {"times": 1, "reply": tool_call("sql_query", sql="SELECT COUNT(*) AS n FROM sales")},
        {"reply": "There are 9712 order lines."},
    ]
    with ScriptedServer({"rules": rules}) as server:
        result = run_cli(project, server, "run", "db_question", "--json")
        tool_messages = [m["content"] for m in server.requests[-1].body["messages"] if m["role"] == "tool"]
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    # the model saw each refusal, naming its query, then the count
    assert len(tool_messages) == len(attempts) + 1
    final_seen = tool_messages[-1]
    for sql, seen in zip(attempts, tool_messages, strict=False):
        assert "refused" in seen and sql.split()[0] in seen, seen
    assert "9712" in final_seen
    assert hashlib.sha256(sales_sqlite.read_bytes()).hexdigest() == before
    with sqlite3.connect(sales_sqlite) as db:
        assert db.execute("SELECT COUNT(*), SUM(revenue) > 0 FROM sales").fetchone() == (9712, 1)
    assert not list(project.rglob("stolen.db"))
    events = [json.loads(line) for line in result.stdout.splitlines()]
    assert events[-1]["status"] == "completed"


def test_validate_catches_sql_mistakes(project: Path) -> None:
    write(project / "sources.d" / "bad.yaml", """\
apiVersion: runner/v1
kind: Source
name: leaky
url: postgresql+psycopg://reader:hunter2-secret@db.example.com/sales
""")
    write(project / "tasks.d" / "bad_sql.yaml", """\
apiVersion: runner/v1
kind: Task
name: bad_sql
inputs: {day: {type: date, default: today}}
sources:
  files: {url: "sqlite:///x.db", files: {t: t.csv}}
pipeline:
  steps:
    - id: pasted
      tool: load_table
      args: {source: leaky, query: "SELECT * FROM sales WHERE date = '{{ inputs.day }}'"}
    - id: typo
      tool: sql_query
      args: {source: sales_dbb, sql: "SELECT 1"}
    - id: unnamed
      tool: load_table
      args: {query: "SELECT 1"}
""")
    result = run_cli(project, None, "validate")
    assert result.returncode == 2, result.stdout + result.stderr
    out = result.stdout + result.stderr
    assert "sources.d/bad.yaml:4:6: error: /url: the URL holds a password" in out
    assert "hunter2-secret" not in out
    assert "/pipeline/steps/0/args/query: the query of a load_table step is not a template" in out
    assert "/pipeline/steps/1/args/source: unknown source 'sales_dbb'" in out
    assert "/pipeline/steps/2/args: a load_table query needs a source" in out
    assert "/sources/files/url: files: are read by DuckDB in memory" in out
    assert "Traceback" not in out


def test_an_agents_sql_query_sources_must_be_the_tasks(project: Path, sales_sqlite: Path) -> None:
    sqlite_task(project, sales_sqlite, agent_tools="[{name: sql_query, settings: {sources: [shopp]}}]")
    result = run_cli(project, None, "validate")
    out = result.stdout + result.stderr
    assert result.returncode == 2
    assert "agent 'db_analyst' gives sql_query the source 'shopp', which this task does not have. Did you mean 'shop'?" in out


def test_sql_query_settings_are_typed_at_validate_time(project: Path) -> None:
    write(project / "agents.d" / "typed.yaml", """\
apiVersion: runner/v1
kind: Agent
name: typed
model: {id: gpt-4o-mini}
tools: [{name: sql_query, settings: {max_rows: "many", timeout_seconds: -1, allow: ["a.b.c"], srcs: [x]}}]
""")
    result = run_cli(project, None, "validate", "agents.d/typed.yaml")
    out = result.stdout + result.stderr
    assert result.returncode == 2
    assert "/tools/0/settings/max_rows: 'many' is a string" in out
    assert "/tools/0/settings/timeout_seconds" in out
    assert "/tools/0/settings/allow/0" in out
    assert "unknown key 'srcs'. Did you mean 'sources'?" in out


def test_missing_secret_variable_fails_the_step_naming_it(project: Path) -> None:
    with ScriptedServer({"fallback": "x"}) as server:
        result = run_cli(project, server, "run", "daily_report_pg", "--input", f"date={DAY}", "--no-report")
        assert not server.requests  # the load failed before any model call
    assert result.returncode == 1
    assert "SALES_DB_URL" in result.stderr and "Traceback" not in result.stderr
    assert CANARY not in result.stderr
