"""The layout stamp of a PostgreSQL run store, through the real CLI (``$RUNNER_STORE_URL``): a
new store is stamped in ``store_meta``; one from a newer runner (a higher version, or a value
this runner never writes) is refused with one line naming the store and the fix, exit 2, no
model call, and is left as it was; an older, unstamped store keeps its rows and is stamped."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from runner.model.server import ScriptedServer
from runner.store.runstore import RunStore
from runner.store.store_version import STORE_VERSION
from tests.support.project import copy_shipped, run_cli

pytestmark = pytest.mark.timeout(240)
TRIAGE = '{"category": "bug", "urgency": "high", "summary": "It crashes."}'
RUN = ("run", "triage_ticket", "-i", "subject=a", "-i", "body=b")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return copy_shipped(tmp_path / "project")


def runner(root: Path, url: str, *args: str) -> subprocess.CompletedProcess[str]:
    with ScriptedServer({"fallback": TRIAGE}) as server:
        done = run_cli(root, server, *args, env={"RUNNER_STORE_URL": url}, drop=("RUNNER_",), timeout=200)
        done.stderr += f"\n[model requests: {len(server.requests)}]"
    return done


def query(url: str, sql: str) -> list[tuple[object, ...]]:
    import psycopg

    with psycopg.connect(url, autocommit=True) as db:
        cursor = db.execute(sql)
        return list(cursor.fetchall()) if cursor.description else []


def stamped(url: str) -> list[tuple[object, ...]]:
    return query(url, "SELECT key, value FROM store_meta")


def test_a_new_postgres_store_is_stamped(project: Path, postgres_url: str) -> None:
    done = runner(project, postgres_url, *RUN)
    assert done.returncode == 0, done.stderr
    assert stamped(postgres_url) == [("store_version", str(STORE_VERSION))]
    again = runner(project, postgres_url, "runs")  # opening it again changes nothing
    assert again.returncode == 0 and stamped(postgres_url) == [("store_version", str(STORE_VERSION))]


@pytest.mark.parametrize("value", ["999", str(STORE_VERSION + 1), "v9-beta"])
@pytest.mark.parametrize("command", [RUN, ("runs",), ("stats",)])
def test_a_postgres_store_from_a_newer_runner_is_refused_and_kept(
    project: Path, postgres_url: str, value: str, command: tuple[str, ...]
) -> None:
    store = RunStore(postgres_url)
    store.start_run("run-old", "triage_ticket", {}, "hash", {})
    store.close()
    query(postgres_url, f"UPDATE store_meta SET value = '{value}' WHERE key = 'store_version'")
    done = runner(project, postgres_url, *command)
    assert "Traceback" not in done.stderr, done.stderr
    (line,) = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == 2 and "written by a newer runner (store version" in line and "upgrade runner" in line
    assert "RUNNER_STORE_URL" in line and "[model requests: 0]" in done.stderr
    assert stamped(postgres_url) == [("store_version", value)]
    assert query(postgres_url, "SELECT run_id FROM runs") == [("run-old",)]


def test_an_unstamped_postgres_store_keeps_its_rows_and_is_stamped(project: Path, postgres_url: str) -> None:
    store = RunStore(postgres_url)
    for i in range(3):
        store.start_run(f"run-{i:03d}", "triage_ticket", {}, "hash", {})
    store.close()
    query(postgres_url, "DROP TABLE store_meta")  # as runners before the stamp left a store
    done = runner(project, postgres_url, "runs")
    assert done.returncode == 0 and done.stdout.count("run-00") == 3, done.stderr
    assert stamped(postgres_url) == [("store_version", str(STORE_VERSION))]
