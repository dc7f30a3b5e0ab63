"""A damaged or foreign budget ledger is refused with the file named, never rewritten: through
the real CLI, ``runner run`` and ``runner batch`` of a task under a budget and ``runner budgets`` meet a
``budgets.sqlite3`` of garbage bytes, another application's SQLite database, or a
``cap_scopes`` table of another shape (in the file, or in the shared PostgreSQL store). Each
exits 2 (a store file that needs a person, as the run store's refusals) with one line naming
the ledger, no model call is made, and the file's bytes (or the table) are as they were."""

from __future__ import annotations

import hashlib
import random
import sqlite3
import subprocess
from pathlib import Path

import pytest

from runner.model.server import ScriptedServer
from tests.budgets.test_budget_runs_cli import env_for
from tests.support.project import run_cli, write_project

pytestmark = pytest.mark.timeout(240)
FILES = {
    "agents.d/a.yaml": "apiVersion: runner/v1\nkind: Agent\nname: writer\nmodel: {id: gpt-4o-mini}\nsystem_prompt: Write.\n",
    "tasks.d/t.yaml": "apiVersion: runner/v1\nkind: Task\nname: digest\nagent: writer\ngoal: Write.\n",
    "budgets.d/daily.yaml": "apiVersion: runner/v1\nkind: Budget\nname: daily\nmax_cost_usd: 2\nwindow: day\n",
    "rows.jsonl": '{"id": "a"}\n{"id": "b"}\n',
}
COMMANDS = [
    ("run", "digest", "--no-report"), ("budgets",), ("budgets", "--json"),
    ("batch", "digest", "--input", "rows.jsonl", "--output", "out.jsonl", "--progress", "none"),
]
OTHER_SHAPE = "CREATE TABLE cap_scopes (key TEXT PRIMARY KEY, quota INTEGER)"


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def error_line(done: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in done.stderr, done.stderr
    (line,) = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    return line


def sqlite_file(path: Path, *statements: str) -> None:
    """An SQLite database of someone else's (rollback journal, as most applications leave it)."""
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA journal_mode=DELETE")
        for statement in statements:
            db.execute(statement)
    db.close()


def make_ledger(path: Path, how: str) -> None:
    path.parent.mkdir(parents=True)
    if how == "garbage":
        path.write_bytes(random.Random(25).randbytes(8192))
    elif how == "another application":
        sqlite_file(path, "CREATE TABLE contacts (id INTEGER PRIMARY KEY, email TEXT)",
                    "INSERT INTO contacts (email) VALUES ('a@example.com')")  # fmt: skip
    else:
        sqlite_file(path, OTHER_SHAPE, "INSERT INTO cap_scopes VALUES ('budget:daily:x', 7)")


@pytest.mark.parametrize("how", ["garbage", "another application", "another cap_scopes"])
@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_a_damaged_or_foreign_ledger_file_is_refused_by_name_and_left_as_it_was(
    tmp_path: Path, how: str, command: tuple[str, ...]
) -> None:
    root = write_project(tmp_path / "p", FILES)
    ledger = root / ".runner" / "budgets.sqlite3"
    make_ledger(ledger, how)
    before = digest(ledger)
    with ScriptedServer({"fallback": "Written."}) as server:
        done = run_cli(root, server, *command, drop=("RUNNER_",))
        assert server.requests == []  # refused before any call
    assert done.returncode == 2, done.stdout + done.stderr
    line = error_line(done)
    assert str(ledger) in line
    if how == "garbage":
        assert "(the budget ledger) is not a readable SQLite database" in line and "move it away" in line
    elif how == "another application":
        assert "is not a budget ledger (it holds other tables (contacts) and no 'cap_scopes' table)" in line
    else:
        assert "is not a budget ledger (its table 'cap_scopes' has no column(s) " in line
    assert "it was left as it was" in line or how == "garbage"
    assert digest(ledger) == before  # nothing rewritten: not a row, not the journal mode
    assert not any(p.name.startswith("budgets.sqlite3-") for p in ledger.parent.iterdir())  # no -wal, -shm, -journal
    assert not (root / "out.jsonl").exists()  # a batch stops before its first row, not row by row


def test_a_cap_scopes_table_of_another_shape_in_the_store_is_refused_untouched(
    tmp_path: Path, store_target: str | Path
) -> None:
    root = write_project(tmp_path / "p", FILES)
    if isinstance(store_target, str):
        import psycopg

        with psycopg.connect(store_target, autocommit=True) as pg:
            pg.execute(OTHER_SHAPE)
            pg.execute("INSERT INTO cap_scopes VALUES ('budget:daily:x', 7)")
        named = "is not a budget ledger (its table 'cap_scopes' has no column(s) "
    else:
        make_ledger(root / ".runner" / "budgets.sqlite3", "another cap_scopes")
        named = f"{root / '.runner' / 'budgets.sqlite3'} is not a budget ledger (its table 'cap_scopes' has no column(s) "
    for command in COMMANDS:
        with ScriptedServer({"fallback": "Written."}) as server:
            done = run_cli(root, server, *command, env=env_for(store_target), drop=("RUNNER_STORE",))
            assert server.requests == []
        assert done.returncode == 2 and named in error_line(done), done.stderr
    if isinstance(store_target, str):
        with psycopg.connect(store_target) as pg:
            columns = [r[0] for r in pg.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = 'cap_scopes' ORDER BY ordinal_position"
            )]  # fmt: skip
            rows = pg.execute("SELECT * FROM cap_scopes").fetchall()
            tables = {r[0] for r in pg.execute("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")}
        assert columns == ["key", "quota"] and rows == [("budget:daily:x", 7)]
        assert "cap_entries" not in tables  # the ledger's other tables were not made beside it


@pytest.mark.parametrize("how", ["garbage", "another application", "another cap_scopes"])
@pytest.mark.parametrize("command", [("caps", "show"), ("caps", "settle-dead")], ids=" ".join)
def test_runner_caps_refuses_a_foreign_ledger_file_before_writing_to_it(
    tmp_path: Path, how: str, command: tuple[str, ...]
) -> None:
    ledger = tmp_path / "shared" / "ledger.sqlite3"
    make_ledger(ledger, how)
    before = digest(ledger)
    done = run_cli(tmp_path, None, *command, "--store", str(ledger), drop=("RUNNER_",))
    assert done.returncode == 2, done.stdout + done.stderr
    assert str(ledger) in error_line(done)
    assert digest(ledger) == before
    assert not any(p.name.startswith("ledger.sqlite3-") for p in ledger.parent.iterdir())  # no -wal, -shm, -journal
