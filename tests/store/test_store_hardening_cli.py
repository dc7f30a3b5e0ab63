"""Through the real CLI: commands that only read open a store read-only and never write to a
file that is not runner's; ``runs prune`` deletes a run's provider-batch answers and tool
results with it; ages of any size are an answer or a clear exit 2; and every ``--json`` output
is valid JSON, a non-finite cost in the store included."""

from __future__ import annotations

import json
import math
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from runner.model.server import ScriptedServer
from runner.store.provider_answers import ProviderAnswers
from runner.store.provider_tools import ProviderToolResults
from runner.store.runstore import RunStore

from .test_transcripts_cli import SCRIPT, Cli, age_run

pytestmark = pytest.mark.timeout(300)
READING = [
    ("runs",), ("runs", "--json"), ("runs", "show", "some-run"), ("runs", "prune", "--older-than", "1d", "--dry-run"),
    ("stats",), ("stats", "--json"), ("report", "some-run"),
]
WRITING = [("runs", "prune", "--older-than", "1d")]


def strict_json(text: str) -> Any:
    """``text`` parsed as JSON proper: ``NaN`` and ``Infinity`` refused."""
    def refuse(constant: str) -> None:
        raise AssertionError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


def with_store(args: tuple[str, ...], store: Path) -> tuple[str, ...]:
    """``args`` with ``--store STORE`` after the command (``runs`` takes it before its subcommand)."""
    return (args[0], "--store", str(store), *args[1:])


def other_application(path: Path) -> Path:
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA journal_mode=DELETE")
        db.execute("CREATE TABLE contacts (id INTEGER PRIMARY KEY, email TEXT)")
        db.execute("INSERT INTO contacts (email) VALUES ('a@example.com')")
    db.close()
    return path


@pytest.mark.parametrize("args", READING + WRITING, ids=" ".join)
def test_another_applications_database_is_refused_and_left_as_it_was(tmp_path: Path, args: tuple[str, ...]) -> None:
    path = other_application(tmp_path / "app.db")
    before = path.read_bytes()
    done = Cli(tmp_path, tmp_path / "unused")(*with_store(args, path))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "is not a run store" in done.stderr and "contacts" in done.stderr and "Traceback" not in done.stderr
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["app.db"]  # no -wal, no -shm, no journal
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA journal_mode").fetchone() == ("delete",)
    db.close()


def test_a_runs_table_of_another_shape_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA journal_mode=DELETE")
        db.execute("CREATE TABLE runs (id INTEGER PRIMARY KEY, distance_km REAL)")
    db.close()
    before = path.read_bytes()
    for args in (("runs",), ("stats", "--json"), ("runs", "prune", "--older-than", "30d")):
        done = Cli(tmp_path, path)(*with_store(args, path))
        assert done.returncode == 2 and "its table 'runs' has no column(s)" in done.stderr, done.stderr
    assert path.read_bytes() == before


@pytest.fixture(scope="module")
def recorded_once(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project whose store holds two real runs, ``old-run`` and ``new-run``, made once per module."""
    from tests.support.project import copy_project

    from .test_transcripts_cli import REPO

    project = copy_project(REPO / "tests" / "runs" / "project", tmp_path_factory.mktemp("recorded") / "project")
    cli = Cli(project, project / ".runner" / "runs.sqlite3")
    with ScriptedServer(SCRIPT) as server:
        cli.run(server, 1, "old-run")
        cli.run(server, 2, "new-run")
    return project


@pytest.fixture
def recorded(recorded_once: Path, tmp_path: Path) -> Cli:
    """The test's own copy of :func:`recorded_once` (no process has the store open: the copy is whole)."""
    project = Path(shutil.copytree(recorded_once, tmp_path / "project", symlinks=True))
    return Cli(project, project / ".runner" / "runs.sqlite3")


def test_reading_commands_work_on_a_store_they_cannot_write(recorded: Cli) -> None:
    store = recorded.target
    assert isinstance(store, Path)
    before = store.read_bytes()
    store.chmod(0o444)
    try:
        for args in (("runs", "--json"), ("runs", "show", "old-run", "--json"), ("stats", "--json"),
                     ("runs", "prune", "--older-than", "1s", "--dry-run", "--json")):  # fmt: skip
            done = recorded(*args)
            assert done.returncode == 0, (args, done.stderr)
            strict_json(done.stdout)
    finally:
        store.chmod(0o644)
    assert store.read_bytes() == before


def test_prune_deletes_the_provider_batch_answers_and_tool_results_of_its_runs(recorded: Cli) -> None:
    store = RunStore(recorded.target)
    try:
        for run in ("old-run", "new-run"):
            answers = ProviderAnswers(store.database)
            answers.sent(run, f"fp-{run}", None)
            answers.answered(run, f"fp-{run}", {"choices": [{"message": {"content": f"answer of {run}"}}]})
            ProviderToolResults(store.database).keep(run, f"key-{run}", {"output": f"tool of {run}"}, "state")
    finally:
        store.close()
    age_run(recorded, "old-run", 5)
    dry = strict_json(recorded("runs", "prune", "--older-than", "30d", "--dry-run", "--json").stdout)
    assert dry["rows"]["provider_answers"] == 1 and dry["rows"]["provider_tool_results"] == 1
    done = recorded("runs", "prune", "--older-than", "30d", "--json")
    assert done.returncode == 0, done.stderr
    assert strict_json(done.stdout)["rows"]["provider_answers"] == 1
    with sqlite3.connect(recorded.target) as db:
        for table in ("provider_answers", "provider_tool_results"):
            assert db.execute(f"SELECT run_id FROM {table}").fetchall() == [("new-run",)], table
    db.close()


def test_prune_of_a_store_without_provider_tables(recorded: Cli) -> None:
    age_run(recorded, "old-run", 5)
    done = recorded("runs", "prune", "--older-than", "30d", "--json")
    assert done.returncode == 0, done.stderr
    assert "provider_answers" not in strict_json(done.stdout)["rows"]


@pytest.mark.parametrize("age", ["1000000d", "520000w", "315000000000s"])
def test_prune_ages_before_the_year_one_delete_nothing(recorded: Cli, age: str) -> None:
    age_run(recorded, "old-run", 5)
    done = recorded("runs", "prune", "--older-than", age, "--json")
    assert done.returncode == 0, done.stderr
    pruned = strict_json(done.stdout)
    assert pruned["runs"] == 0 and pruned["kept_runs"] == 2 and pruned["cutoff"].startswith("0001-01-01")


@pytest.mark.parametrize("age", ["nan", "inf", "1e3d", "-5d", "+5d", "5.5d", "٣d", "３d", "5 days", "1" * 13 + "d", "0s", "999999999999w", "3652426d"])
def test_prune_refuses_ages_it_cannot_read(recorded: Cli, age: str) -> None:
    done = recorded("runs", "prune", "--older-than", age)
    assert done.returncode == 2 and "--older-than" in done.stderr and "Traceback" not in done.stderr, done.stderr


@pytest.mark.parametrize(("since", "until"), [
    ("520000w", None), ("3652425d", None), ("0001-01-01", None), ("0001-01-01T00:00+01:00", None),
    ("0001-01-02", "0001-01-03"), ("1000000d", "1d"),
])  # fmt: skip
def test_stats_windows_reaching_the_year_one(recorded: Cli, since: str, until: str | None) -> None:
    done = recorded("stats", "--json", "--since", since, *(("--until", until) if until else ()))
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    strict_json(done.stdout)


@pytest.mark.parametrize("since", ["٣d", "nan", "-3d", "3.5d", "1" * 13 + "d", "3652426d"])
def test_stats_refuses_windows_it_cannot_read(recorded: Cli, since: str) -> None:
    done = recorded("stats", "--since", since)
    assert done.returncode == 2 and "--since" in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_json_output_stays_json_with_a_non_finite_cost_in_the_store(recorded: Cli) -> None:
    with sqlite3.connect(recorded.target) as db:  # a damaged or hand-edited store: SQLite REAL holds an infinity
        db.execute("UPDATE runs SET cost_usd = ? WHERE run_id = 'old-run'", (math.inf,))
        db.execute("UPDATE model_calls SET cost_usd = ? WHERE run_id = 'new-run'", (-math.inf,))
        record = json.loads(db.execute("SELECT record_json FROM runs WHERE run_id = 'old-run'").fetchone()[0])
        record["usage"]["cost_usd"] = math.inf
        db.execute("UPDATE runs SET record_json = ? WHERE run_id = 'old-run'", (json.dumps(record),))
    db.close()
    for args in (("stats", "--json"), ("runs", "--json"), ("runs", "show", "old-run", "--json")):
        done = recorded(*args)
        assert done.returncode == 0, (args, done.stderr)
        strict_json(done.stdout)
        assert "not finite numbers and are shown as null" in done.stderr, (args, done.stderr)
    shown = strict_json(recorded("runs", "show", "old-run", "--json").stdout)
    assert shown["usage"]["cost_usd"] is None
