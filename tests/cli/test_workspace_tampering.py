"""Sandboxed code replaces a task's workspace file by a link, FIFO, socket, directory or hard
link; a resume (``runner run --run-id``) and a ``runner batch`` retry must never follow it.

Everything goes through the real CLI, the real bubblewrap sandbox and, for the model-driven
case, the loopback OpenAI server. The host file must keep its content, no host path may be
created, and the run must end with exit 1, a clear message and a failed record.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from runner.model.server import ScriptedServer

REPO = Path(__file__).resolve().parents[2]
KEY = "sk-test-workspace-0123456789"
ORIGINAL = "host original, do not touch\n"
AGENT = """\
apiVersion: runner/v1
kind: Agent
name: coder
model: {id: gpt-4o-mini, max_tokens: 100}
tools: [python, shell, write_file, read_file]
sandbox: {mode: bwrap, wall_seconds: 20}
"""
TOOL_TASK = """\
apiVersion: runner/v1
kind: Task
name: tamper
inputs:
  n: {{type: integer, default: 1}}
workspace: {{files: [data/input.csv]}}
pipeline:
  steps:
    - {{id: attack, tool: shell, args: {{command: {command}}}}}
    - {{id: later, tool: read_file, args: {{path: missing-on-purpose.txt}}, depends_on: [attack]}}
"""
MODEL_TASK = """\
apiVersion: runner/v1
kind: Task
name: modelled
workspace: {files: [data/input.csv]}
pipeline:
  steps:
    - {id: attack, agent: coder, goal: "TAMPER with the workspace"}
    - {id: later, agent: coder, goal: "SUMMARISE the data", depends_on: [attack]}
"""
SINGLE_TASK = """\
apiVersion: runner/v1
kind: Task
name: single
workspace: {files: [data/input.csv]}
agent: coder
goal: "TAMPER with the workspace"
"""


@pytest.fixture
def host(tmp_path: Path) -> Iterator[Path]:
    """A host directory the sandbox cannot see, with a file worth protecting."""
    victim_dir = Path(tempfile.mkdtemp(prefix="runner-victim-", dir="/tmp"))
    (victim_dir / "host.txt").write_text(ORIGINAL)
    yield victim_dir
    shutil.rmtree(victim_dir, ignore_errors=True)


def make_project(task_yaml: str) -> Path:
    # Under /tmp with mode 755: the sandbox user must be able to reach the workspace.
    root = Path(tempfile.mkdtemp(prefix="runner-ws-", dir="/tmp"))
    root.chmod(0o755)
    for name in ("agents.d", "tasks.d", "data"):
        (root / name).mkdir()
    (root / "agents.d/coder.yaml").write_text(AGENT)
    (root / "tasks.d/task.yaml").write_text(task_yaml)
    (root / "data/input.csv").write_text("a,b\n1,2\n")
    return root


@pytest.fixture
def projects() -> Iterator[list[Path]]:
    made: list[Path] = []
    yield made
    for root in made:
        shutil.rmtree(root, ignore_errors=True)


def runner(root: Path, *args: str, server: ScriptedServer | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI")}
    env["PYTHONPATH"] = str(REPO)
    env["OPENAI_API_KEY"] = KEY
    if server is not None:
        env["OPENAI_BASE_URL"] = server.base_url
    return subprocess.run(
        [sys.executable, "-m", "runner", *args], cwd=root, env=env, capture_output=True, text=True, timeout=300,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip


def stored_run(root: Path, run_id: str) -> sqlite3.Row:
    with sqlite3.connect(root / ".runner/runs.sqlite3") as db:
        db.row_factory = sqlite3.Row
        return db.execute("SELECT status, error, attempts FROM runs WHERE run_id = ?", (run_id,)).fetchone()


def assert_host_untouched(host: Path, before: os.stat_result) -> None:
    victim = host / "host.txt"
    assert victim.read_text() == ORIGINAL
    after = victim.stat()
    assert (after.st_mtime_ns, after.st_size, after.st_nlink) == (before.st_mtime_ns, before.st_size, 1)
    assert sorted(p.name for p in host.iterdir()) == ["host.txt"], "a host path was created"


ATTACKS = {
    "symlink to a host file": ("rm input.csv && ln -s {victim} input.csv", "a symbolic link"),
    "symlink to a missing host path": ("rm input.csv && ln -s {missing} input.csv", "a symbolic link"),
    "symlink whose target spells the key": (f"rm input.csv && ln -s /tmp/{KEY} input.csv", "a symbolic link"),
    "relative symlink out of the workspace": (
        "rm input.csv && ln -s ../../../../..{victim} input.csv",
        "a symbolic link",
    ),
    "FIFO": ("rm input.csv && mkfifo input.csv", "a FIFO"),
    "directory holding a link": ("rm input.csv && mkdir input.csv && ln -s {victim} input.csv/x", "a directory"),
    "unix socket": (
        "rm input.csv && python3 -c \"import socket; socket.socket(socket.AF_UNIX).bind('input.csv')\"",
        "a socket",
    ),
}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("attack", list(ATTACKS))
def test_resume_refuses_a_tampered_task_file(attack: str, host: Path, projects: list[Path]) -> None:
    victim, missing = host / "host.txt", host / "created-by-runner.txt"
    command, what = ATTACKS[attack]
    root = make_project(TOOL_TASK.format(command=json.dumps(command.format(victim=victim, missing=missing))))
    projects.append(root)
    before = victim.stat()

    first = runner(root, "run", "tamper", "--run-id", "r1", "--no-report")
    assert first.returncode == 1, first.stderr  # the later step fails; the attack step completed
    assert "missing-on-purpose.txt" in first.stdout + first.stderr

    resumed = runner(root, "run", "tamper", "--run-id", "r1")
    assert resumed.returncode == 1, resumed.stderr
    assert f"error: workspace file 'input.csv' was replaced by {what}" in resumed.stderr
    assert "not followed or overwritten" in resumed.stderr and "Traceback" not in resumed.stderr
    assert KEY not in resumed.stderr + resumed.stdout + json.dumps(dict(stored_run(root, "r1")))
    assert_host_untouched(host, before)
    assert not missing.exists() and not missing.is_symlink()
    row = stored_run(root, "r1")
    assert row["status"] == "failed" and row["attempts"] == 2
    assert row["error"].startswith("WorkspaceTampered: workspace file 'input.csv' was replaced by")


@pytest.mark.timeout(300)
def test_resume_refuses_a_task_file_hardlinked_to_a_host_file(host: Path, projects: list[Path]) -> None:
    """The kernel stops uid 65534 from hard-linking a root file (protected_hardlinks), so the
    hard link is made the way a host without that protection would let it be made."""
    root = make_project(TOOL_TASK.format(command=json.dumps("true")))
    projects.append(root)
    first = runner(root, "run", "tamper", "--run-id", "r1", "--no-report")
    assert first.returncode == 1, first.stderr
    planted = root / ".runner/workspaces/r1/input.csv"
    planted.unlink()
    os.link(host / "host.txt", planted)
    before = (host / "host.txt").stat()

    resumed = runner(root, "run", "tamper", "--run-id", "r1")
    assert resumed.returncode == 1
    assert "was replaced by a file with 2 hard links" in resumed.stderr and "Traceback" not in resumed.stderr
    assert (host / "host.txt").read_text() == ORIGINAL and (host / "host.txt").stat().st_mtime_ns == before.st_mtime_ns
    assert stored_run(root, "r1")["status"] == "failed"


@pytest.mark.timeout(300)
def test_an_untouched_workspace_resumes_and_a_changed_task_file_is_refreshed(projects: list[Path]) -> None:
    """The neighbour that must keep working: a plain file is compared and re-copied."""
    root = make_project(
        TOOL_TASK.format(command=json.dumps("echo changed > input.csv.new && mv input.csv.new input.csv"))
    )
    projects.append(root)
    assert runner(root, "run", "tamper", "--run-id", "r1", "--no-report").returncode == 1
    workspace = root / ".runner/workspaces/r1"
    assert (workspace / "input.csv").read_text() == "changed\n"

    resumed = runner(root, "run", "tamper", "--run-id", "r1", "--no-report")
    assert resumed.returncode == 1 and "missing-on-purpose.txt" in resumed.stdout + resumed.stderr
    assert "workspace file" not in resumed.stderr
    assert (workspace / "input.csv").read_text() == "a,b\n1,2\n"  # the project's copy again


@pytest.mark.timeout(300)
def test_batch_retry_of_a_row_never_follows_the_link(host: Path, projects: list[Path]) -> None:
    victim, missing = host / "host.txt", host / "created-by-runner.txt"
    command = f"rm input.csv && ln -s {victim} input.csv && ln -s {missing} link2"
    root = make_project(TOOL_TASK.format(command=json.dumps(command)))
    projects.append(root)
    (root / "rows.csv").write_text("id,n\nrow1,1\nrow2,2\n")
    before = victim.stat()

    result = runner(
        root, "batch", "tamper", "--input", "rows.csv", "--output", "out.jsonl", "--id-column", "id",
        "--max-attempts", "3", "--progress", "none",
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    rows = [json.loads(line) for line in (root / "out.jsonl").read_text().splitlines()]
    assert [r["status"] for r in rows] == ["failed", "failed"]
    for row in rows:
        assert "workspace file 'input.csv' was replaced by a symbolic link" in row["error"]
    assert_host_untouched(host, before)
    assert not missing.exists()


@pytest.mark.timeout(300)
def test_model_driven_tampering_then_resume(host: Path, projects: list[Path]) -> None:
    """The model's own python call plants the link; the resume refuses it."""
    victim = host / "host.txt"
    code = f"import os; os.remove('input.csv'); os.symlink({str(victim)!r}, 'input.csv'); print('planted')"
    script = {
        "rules": [
            {
                "when": {"last_message": "TAMPER"},
                "reply": {"tool_calls": [{"name": "python", "arguments": {"code": code}}]},
            },
            {"when": {"last_message": "planted"}, "reply": {"content": "Done tampering."}},
            {"when": {"last_message": "SUMMARISE"}, "reply": {"invalid_json": True}},
        ],
        "fallback": "unexpected",
    }
    root = make_project(MODEL_TASK)
    projects.append(root)
    before = victim.stat()
    with ScriptedServer(script) as server:
        first = runner(root, "run", "modelled", "--run-id", "m1", server=server)
        assert first.returncode == 1, first.stderr
        assert os.readlink(root / ".runner/workspaces/m1/input.csv") == str(victim)
        calls = len(server.requests)
        resumed = runner(root, "run", "modelled", "--run-id", "m1", server=server)
        assert len(server.requests) == calls, "the refused resume spent nothing"
    assert resumed.returncode == 1
    assert "workspace file 'input.csv' was replaced by a symbolic link" in resumed.stderr
    assert "Traceback" not in resumed.stderr and KEY not in resumed.stderr
    assert_host_untouched(host, before)
    assert stored_run(root, "m1")["status"] == "failed"


@pytest.mark.timeout(300)
def test_fresh_retry_wipes_links_without_following_them(host: Path, projects: list[Path]) -> None:
    """A retry that reuses no step wipes the workspace: links to a host file and to a host
    directory are removed, their targets stay, and the new attempt completes."""
    code = (
        "import os; os.symlink({d!r}, 'dirlink'); os.symlink({f!r}, 'filelink');"
        " os.makedirs('sub'); os.symlink({d!r}, 'sub/deeper'); os.remove('input.csv');"
        " os.symlink({f!r}, 'input.csv'); print('planted')"
    ).format(d=str(host), f=str(host / "host.txt"))
    script = {
        "rules": [
            {"when": {"last_message": "TAMPER"}, "times": 1,
             "reply": {"tool_calls": [{"name": "python", "arguments": {"code": code}}]}},
            {"when": {"last_message": "planted"}, "times": 1,
             "reply": {"fault": {"status": 401, "body": {"error": {"message": "key revoked"}}}}},
        ],
        "fallback": "Clean run.",
    }  # fmt: skip
    root = make_project(SINGLE_TASK)
    projects.append(root)
    before = (host / "host.txt").stat()
    with ScriptedServer(script) as server:
        first = runner(root, "run", "single", "--run-id", "s1", server=server)
        assert first.returncode == 1, first.stderr
        retry = runner(root, "run", "single", "--run-id", "s1", server=server)
    assert retry.returncode == 0, retry.stderr
    assert "Clean run." in retry.stdout
    workspace = root / ".runner/workspaces/s1"
    assert sorted(p.name for p in workspace.iterdir()) == ["input.csv"]
    assert (workspace / "input.csv").read_text() == "a,b\n1,2\n" and not (workspace / "input.csv").is_symlink()
    assert_host_untouched(host, before)


@pytest.mark.timeout(300)
def test_an_airflow_retry_resumes_the_same_run_and_refuses_the_link(
    host: Path, projects: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Airflow derives the run id from dag, run and task ids (not the try number), so its
    retry takes the resume path; it must stop there too."""
    from runner.airflow.execution import run_task_for_airflow
    from runner.errors import WorkspaceTampered

    victim = host / "host.txt"
    root = make_project(TOOL_TASK.format(command=json.dumps(f"rm input.csv && ln -s {victim} input.csv")))
    projects.append(root)
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    before = victim.stat()
    ids = {"dag_id": "daily", "dag_run_id": "scheduled__2026-12-01", "task_id": "tamper"}
    first = run_task_for_airflow("tamper", root=root, inputs={}, **ids)
    assert first["status"] == "failed"
    with pytest.raises(WorkspaceTampered, match="was replaced by a symbolic link"):
        run_task_for_airflow("tamper", root=root, inputs={}, **ids)
    assert_host_untouched(host, before)
    assert stored_run(root, first["run_id"])["status"] == "failed"
