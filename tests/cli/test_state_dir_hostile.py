"""Where the local state goes, when it cannot go there, through the real CLI: ``RUNNER_STATE_DIR``
naming a regular file (or a path through one) says it is not a directory and what to do; a
project's ``.runner`` that is a symbolic link out of the project is not followed (the runner
writes, and wipes workspaces, only where the project or an explicit variable says); and
``batch_api`` limits above what any provider takes are refused by ``validate``."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from runner.model.server import ScriptedServer
from tests.support.project import copy_shipped, run_cli, write_project

pytestmark = pytest.mark.timeout(240)
TRIAGE = '{"category": "bug", "urgency": "high", "summary": "It crashes."}'
RUN = ("run", "triage_ticket", "-i", "subject=a", "-i", "body=b")
BATCH = ("batch", "triage_ticket", "--input", "tickets.csv", "--output", "out.jsonl", "--progress", "none")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = copy_shipped(tmp_path / "project")
    (root / "tickets.csv").write_text("id,subject,body\n1,a,crash\n")
    return root


def cli(root: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    with ScriptedServer({"fallback": TRIAGE}) as server:
        done = run_cli(root, server, *args, env=env, drop=("RUNNER_",), timeout=200)
        done.stderr += f"\n[model requests: {len(server.requests)}]"
    return done


def error_line(done: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in done.stderr, done.stderr
    (line,) = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    return line


@pytest.mark.parametrize("command", [RUN, BATCH, ("runs",), ("stats",)])
@pytest.mark.parametrize("below", ["", "sub/dir"])
def test_a_state_dir_that_is_a_file_says_so(project: Path, tmp_path: Path, command: tuple[str, ...], below: str) -> None:
    blocker = tmp_path / "state-file"
    blocker.write_text("not a directory")
    done = cli(project, *command, env={"RUNNER_STATE_DIR": str(blocker / below) if below else str(blocker)})
    line = error_line(done)
    assert done.returncode == 2
    assert f"{blocker} is a file, not a directory" in line or "it is a file, not a directory" in line
    assert "File exists" not in line and "move that file away" in line
    assert "[model requests: 0]" in done.stderr
    assert blocker.read_text() == "not a directory"


def test_a_dot_runner_link_leading_out_of_the_project_is_not_followed(project: Path, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (project / ".runner").symlink_to(outside)
    for command in (RUN, BATCH, ("runs",)):
        done = cli(project, *command)
        line = error_line(done)
        assert done.returncode == 2 and "symbolic link" in line and f"RUNNER_STATE_DIR={outside}" in line
    assert list(outside.iterdir()) == []  # nothing written there


def test_the_named_place_is_used_when_given_explicitly(project: Path, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    done = cli(project, *RUN, env={"RUNNER_STATE_DIR": str(outside)})
    assert done.returncode == 0, done.stderr
    assert (outside / "runs.sqlite3").is_file()


def test_a_dot_runner_link_inside_the_project_is_fine(project: Path) -> None:
    (project / "state").mkdir()
    (project / ".runner").symlink_to(project / "state")
    done = cli(project, *RUN)
    assert done.returncode == 0, done.stderr
    assert (project / "state" / "runs.sqlite3").is_file()


AGENT = "apiVersion: runner/v1\nkind: Agent\nname: a\nmodel: {id: gpt-4o-mini}\n"
TASK = "apiVersion: runner/v1\nkind: Task\nname: t\nagent: a\ngoal: go\nbatch_api: {{{limits}}}\n"


@pytest.mark.parametrize(
    ("limits", "said"),
    [
        ("max_file_bytes: 100000000000000000000000", "/batch_api/max_file_bytes: 100000000000000000000000 is greater than the maximum of 256000000"),
        ("max_file_bytes: 1.0e+23", "/batch_api/max_file_bytes: 1e+23 is greater than the maximum of 256000000"),
        ("max_file_bytes: 1e23", "/batch_api/max_file_bytes: 1e+23 is greater than the maximum of 256000000"),  # YAML 1.2: a number
        ("max_requests: 100001", "/batch_api/max_requests: 100001 is greater than the maximum of 100000"),
        ("max_file_bytes: 0", "/batch_api/max_file_bytes: 0 is less than the minimum of 1"),
    ],
)
def test_batch_api_limits_beyond_any_provider_are_refused(tmp_path: Path, limits: str, said: str) -> None:
    root = write_project(tmp_path / "p", {"agents.d/a.yaml": AGENT, "tasks.d/t.yaml": TASK.format(limits=limits)})
    done = run_cli(root, None, "validate", timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "tasks.d/t.yaml:6:" in done.stdout + done.stderr and said in done.stdout + done.stderr


def test_batch_api_limits_within_provider_limits_are_valid(tmp_path: Path) -> None:
    root = write_project(tmp_path / "p", {"agents.d/a.yaml": AGENT,
                                          "tasks.d/t.yaml": TASK.format(limits="max_file_bytes: 200000000, max_requests: 100000")})  # fmt: skip
    done = run_cli(root, None, "validate", timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(("flag", "value"), [("--batch-max-file-bytes", "256000001"), ("--batch-max-requests", "100001")])
def test_batch_api_flags_beyond_any_provider_are_usage_errors(project: Path, flag: str, value: str) -> None:
    done = run_cli(project, None, *BATCH, "--via", "batch-api", flag, value, drop=("RUNNER_",), timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr and flag in done.stderr


@pytest.mark.parametrize("link", ["reports", "reports/triage_ticket"])
@pytest.mark.parametrize("command", [RUN, BATCH])
def test_a_reports_link_leading_out_of_the_project_is_not_followed(
    project: Path, tmp_path: Path, link: str, command: tuple[str, ...]
) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (project / link).parent.mkdir(parents=True, exist_ok=True)
    (project / link).symlink_to(outside)
    done = cli(project, *command)
    line = error_line(done)
    assert done.returncode == 2 and "a symbolic link leads it out of the project" in line and "remove the link" in line
    assert "[model requests: 0]" in done.stderr and list(outside.rglob("*")) == []


def test_an_explicit_reports_dir_outside_the_project_is_used(project: Path, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    done = cli(project, *RUN, "--reports-dir", str(outside))
    assert done.returncode == 0, done.stderr
    assert list(outside.glob("triage_ticket/*/report.json"))
