"""Neighbours of the store and deadline cases, through the real CLI: environment variables with
odd values (an endpoint that is not a URL, a store URL that is not PostgreSQL's) and the other
SQLite files the runner keeps (a knowledge index, ``--store PATH``) when damaged. Each is one
line naming the place and the fix, exit 2, no traceback, no model call, no secret echoed."""

from __future__ import annotations

import random
import subprocess
from pathlib import Path

import pytest

from runner.model.server import ScriptedServer
from tests.knowledge.documents import write_docs
from tests.support.project import copy_shipped, run_cli, write_project

pytestmark = pytest.mark.timeout(240)
TRIAGE = '{"category": "bug", "urgency": "high", "summary": "It crashes."}'
RUN = ("run", "triage_ticket", "-i", "subject=a", "-i", "body=b")
SECRET = "sk-secret-in-url-0123456789"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return copy_shipped(tmp_path / "project")


def error_line(done: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in done.stderr, done.stderr
    (line,) = [line for line in done.stderr.splitlines() if line.lower().startswith("error:")]
    return line


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("notaurl", "'notaurl'"),
        ("ftp://files.example/v1", "'ftp://files.example/v1'"),
        ("http:///v1", "'http:///v1'"),
        ("http://127.0.0.1:99999/v1", "'http://127.0.0.1/v1'"),
        (f"http://user:{SECRET}@/v1", "'http:///v1'"),
    ],
)
def test_an_endpoint_that_is_not_a_url_is_refused_before_any_call(project: Path, url: str, shown: str) -> None:
    with ScriptedServer({"fallback": TRIAGE}) as server:
        done = run_cli(project, server, *RUN, env={"OPENAI_BASE_URL": url}, drop=("RUNNER_",), timeout=120)
        assert not server.requests
    line = error_line(done)
    assert done.returncode == 2 and f"$OPENAI_BASE_URL {shown} is not an http(s) URL with a host" in line
    assert SECRET not in done.stderr + done.stdout


def test_a_base_url_in_the_agent_that_is_not_a_url_names_the_field(tmp_path: Path) -> None:
    agent = "apiVersion: runner/v1\nkind: Agent\nname: a\nmodel: {id: gpt-4o-mini, base_url: 'unix:/tmp/socket'}\n"
    root = write_project(tmp_path / "p", {"agents.d/a.yaml": agent, "tasks.d/t.yaml": "apiVersion: runner/v1\nkind: Task\nname: t\nagent: a\ngoal: go\n"})
    done = run_cli(root, None, "run", "t", drop=("RUNNER_",), env={"OPENAI_API_KEY": "sk-x"}, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr and "base_url" in done.stderr


@pytest.mark.parametrize("value", ["garbage", "sqlite:///tmp/x", f"postgresql://u:{SECRET}@[::1"])
def test_a_store_url_that_is_not_postgresql_is_a_usage_error_without_its_password(project: Path, value: str) -> None:
    for command in (RUN, ("runs",)):
        done = run_cli(project, None, *command, env={"RUNNER_STORE_URL": value}, timeout=120)
        assert done.returncode == 2 and error_line(done) and SECRET not in done.stderr + done.stdout


@pytest.mark.parametrize("how", ["garbage", "directory"])
def test_a_store_given_with_store_that_is_damaged_is_named(project: Path, tmp_path: Path, how: str) -> None:
    store = tmp_path / "elsewhere.sqlite3"
    if how == "garbage":
        store.write_bytes(random.Random(5).randbytes(4096))
    else:
        store.mkdir()
    done = run_cli(project, None, "runs", "--store", str(store), drop=("RUNNER_",), timeout=120)
    line = error_line(done)
    assert done.returncode == 2 and str(store) in line


KNOWLEDGE = "apiVersion: runner/v1\nkind: Knowledge\nname: product_docs\nsources: [docs]\n"


@pytest.mark.parametrize("how", ["garbage", "directory"])
def test_a_damaged_knowledge_index_names_the_file_and_how_to_rebuild(tmp_path: Path, how: str) -> None:
    root = write_project(tmp_path / "p", {"knowledge.d/docs.yaml": KNOWLEDGE})
    write_docs(root / "docs")
    assert run_cli(root, None, "index", drop=("RUNNER_",)).returncode == 0
    index = root / ".runner" / "knowledge" / "product_docs.sqlite3"
    for suffix in ("-wal", "-shm"):
        Path(f"{index}{suffix}").unlink(missing_ok=True)
    index.unlink()
    if how == "garbage":
        index.write_bytes(random.Random(9).randbytes(4096))
    else:
        index.mkdir()
    done = run_cli(root, None, "index", drop=("RUNNER_",), timeout=120)
    line = error_line(done)
    assert done.returncode == 2 and str(index) in line and "(the knowledge index)" in line
    if how == "garbage":
        assert "`runner index` rebuilds it" in line
        index.unlink()
        rebuilt = run_cli(root, None, "index", drop=("RUNNER_",), timeout=120)
        assert rebuilt.returncode == 0 and "6 added" in rebuilt.stdout
