"""A project on a read-only mount (a container image, a deployed checkout the worker's user may
not write): the runner's local state goes to ``$RUNNER_STATE_DIR``, reports to
``--reports-dir``; without them the run stops with exit 2, naming the directory and the fix,
before any model call.

The project is mounted read-only with bubblewrap (``--ro-bind``: a real read-only mount,
which holds for root too, unlike permission bits), and the real CLI runs inside, from ``/``
as an Airflow worker would.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from runner.local_state import STATE_DIR_ENV, state_dir
from runner.model.server import ScriptedServer
from tests.support.services import requires

REPO = Path(__file__).resolve().parents[2]
KEY = "sk-read-only-canary-0123456789"
TRIAGE = {"fallback": '{"category": "bug", "urgency": "high", "summary": "It broke."}'}


def _bwrap_works() -> bool:
    if not shutil.which("bwrap"):
        return False
    probe = subprocess.run(["bwrap", "--dev-bind", "/", "/", "--ro-bind", "/tmp", "/tmp", "true"], capture_output=True, check=False)
    return probe.returncode == 0


needs_bwrap = requires(_bwrap_works(), "needs bubblewrap for a read-only bind mount")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    for part in ("agents.d", "tasks.d", "examples/data", "examples/batch"):
        shutil.copytree(REPO / part, root / part)
    return root


def read_only(project: Path, server: ScriptedServer, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``runner ARGS`` with ``project`` mounted read-only, started in ``/``."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI", "RUNNER_"))}
    environment.update(PYTHONPATH=str(REPO), OPENAI_BASE_URL=server.base_url, OPENAI_API_KEY=KEY, **env)
    argv = ["bwrap", "--dev-bind", "/", "/", "--ro-bind", str(project), str(project), "--chdir", "/",
            sys.executable, "-m", "runner", *args, "--root", str(project)]  # fmt: skip
    return subprocess.run(argv, env=environment, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)


def test_state_dir_is_the_project_dot_runner_unless_configured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert state_dir(tmp_path) == tmp_path / ".runner"
    monkeypatch.setenv(STATE_DIR_ENV, str(tmp_path / "state"))
    assert state_dir(Path("/srv/project")) == tmp_path / "state"
    monkeypatch.setenv(STATE_DIR_ENV, "var/state")  # relative: from the project, never from the working directory
    assert state_dir(Path("/srv/project")) == Path("/srv/project/var/state")
    monkeypatch.setenv(STATE_DIR_ENV, "  ")
    assert state_dir(tmp_path) == tmp_path / ".runner"


@needs_bwrap
def test_a_read_only_project_stops_before_any_model_call_and_names_the_fix(project: Path) -> None:
    with ScriptedServer(TRIAGE) as server:
        done = read_only(project, server, "run", "daily_report", "--input", "date=2026-11-30")
        assert server.requests == []
    assert done.returncode == 2, done.stderr
    assert f"cannot write {project / '.runner'}" in done.stderr
    assert "Read-only file system" in done.stderr and "RUNNER_STATE_DIR" in done.stderr
    assert "Traceback" not in done.stderr


@needs_bwrap
def test_with_a_state_dir_but_no_reports_dir_the_run_stops_naming_reports(project: Path, tmp_path: Path) -> None:
    with ScriptedServer(TRIAGE) as server:
        done = read_only(project, server, "run", "triage_ticket", "--input", "subject=s", "--input", "body=b",
                         RUNNER_STATE_DIR=str(tmp_path / "state"))  # fmt: skip
        assert server.requests == []
    assert done.returncode == 2, done.stderr
    assert f"cannot write {project / 'reports'} (run reports)" in done.stderr and "--reports-dir" in done.stderr


@needs_bwrap
def test_a_read_only_project_runs_and_resumes_with_its_state_elsewhere(project: Path, tmp_path: Path) -> None:
    state, reports = tmp_path / "state", tmp_path / "reports"
    args = ("run", "daily_report", "--input", "date=2026-11-30", "--reports-dir", str(reports), "--run-id", "ro-1")
    with ScriptedServer({"fallback": "Revenue was fine."}) as server:
        first = read_only(project, server, *args, RUNNER_STATE_DIR=str(state))
        assert first.returncode == 0, first.stderr
        calls = len(server.requests)
        again = read_only(project, server, *args, RUNNER_STATE_DIR=str(state))
        assert again.returncode == 0, again.stderr
        assert len(server.requests) == calls, "the second run resumed from the store in the state dir: no new call"
    assert (state / "runs.sqlite3").is_file()
    assert (state / "workspaces" / "ro-1").is_dir()  # the pipeline's tool steps wrote their tables and charts here
    assert json.loads((reports / "daily_report" / "ro-1" / "report.json").read_text())["status"] == "completed"
    assert not (project / ".runner").exists() and not (project / "reports").exists()


@needs_bwrap
def test_a_batch_on_a_read_only_project_stops_before_any_row_without_a_report_dir(project: Path, tmp_path: Path) -> None:
    state = tmp_path / "state"
    tickets = project / "tickets.csv"
    tickets.write_text("id,subject,body\nT-1,Login,It fails\nT-2,Bill,Charged twice\n")
    args = ("batch", "triage_ticket", "--input", str(tickets), "--output", str(tmp_path / "out.jsonl"))
    with ScriptedServer(TRIAGE) as server:
        no_state = read_only(project, server, *args)
        no_reports = read_only(project, server, *args, RUNNER_STATE_DIR=str(state))
        assert server.requests == []
        done = read_only(project, server, *args, "--report-dir", str(tmp_path / "report"), RUNNER_STATE_DIR=str(state))
    assert no_state.returncode == 2 and "batch journals" in no_state.stderr and "RUNNER_STATE_DIR" in no_state.stderr
    assert no_reports.returncode == 2 and "--report-dir" in no_reports.stderr
    assert done.returncode == 0, done.stderr
    assert [json.loads(line)["status"] for line in (tmp_path / "out.jsonl").read_text().splitlines()] == ["done", "done"]
    assert list((state / "batches").glob("triage_ticket-*.sqlite3"))
    assert (tmp_path / "report" / "batch_report.json").is_file()
