"""A storage that accepts a connection and never answers cannot hold a batch or a run: every
remote write (a batch output's lock and upload, a report directory at a URL, a ``copy``
delivery) ends at its deadline with one line naming the target and the fix, through the real
CLI. ``hang://`` is a real fsspec filesystem, registered in the CLI process by
``tests/support/hanging_fs/sitecustomize.py``, whose every call blocks for ever."""

from __future__ import annotations

import json
import subprocess
import threading
from pathlib import Path

import pytest

from runner.locations import RemoteTimedOut, bounded
from runner.model.server import ScriptedServer
from tests.support.project import REPO, copy_shipped, run_cli, write_project

pytestmark = pytest.mark.timeout(240)
HANGING = REPO / "tests" / "support" / "hanging_fs"
TRIAGE = '{"category": "bug", "urgency": "high", "summary": "It crashes."}'


def hanging_env(seconds: str | None = "2") -> dict[str, str]:
    env = {"PYTHONPATH": f"{REPO}:{HANGING}"}
    if seconds is not None:
        env["RUNNER_REMOTE_TIMEOUT_SECONDS"] = seconds
    return env


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = copy_shipped(tmp_path / "project")
    (root / "tickets.jsonl").write_text("".join(
        json.dumps({"id": f"T{i}", "subject": "crash", "body": f"It crashes ({i})."}) + "\n" for i in range(2)
    ))  # fmt: skip
    return root


def error_line(done: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in done.stderr, done.stderr
    lines = [line for line in done.stderr.splitlines() if "error" in line.lower()]
    assert lines, done.stderr
    return lines[-1]


def test_a_batch_output_on_a_storage_that_never_answers_stops_at_the_deadline(project: Path) -> None:
    batch = ("batch", "triage_ticket", "--input", "tickets.jsonl", "--output", "hang://bucket/out.jsonl", "--id-column", "id",
             "--progress", "none")  # fmt: skip
    with ScriptedServer({"fallback": TRIAGE}) as server:
        done = run_cli(project, server, *batch, env=hanging_env(), timeout=120)
        assert not server.requests  # stopped at the output's lock, before any row was spent
    line = error_line(done)
    assert done.returncode == 1
    assert "hang://bucket/.out.jsonl.lock" in line and "did not answer within 2 s" in line and "RUNNER_REMOTE_TIMEOUT_SECONDS" in line


def test_a_report_directory_on_a_storage_that_never_answers_fails_the_run_clearly(project: Path) -> None:
    run = ("run", "triage_ticket", "-i", "subject=a", "-i", "body=b", "--reports-dir", "hang://bucket/reports")
    with ScriptedServer({"fallback": TRIAGE}) as server:
        done = run_cli(project, server, *run, env=hanging_env(), timeout=120)
    line = error_line(done)
    assert done.returncode == 1 and "hang://bucket/reports/triage_ticket/" in line and "did not answer within 2 s" in line


AGENT = "apiVersion: runner/v1\nkind: Agent\nname: a\nmodel: {id: gpt-4o-mini, max_tokens: 50}\nsystem_prompt: Be brief.\n"
TASK = """\
apiVersion: runner/v1
kind: Task
name: t
agent: a
goal: say hi
report:
  deliver:
    - copy: {{to: "{to}"{extra}}}
"""


@pytest.mark.parametrize(("extra", "env_seconds", "said"), [(", timeout_seconds: 1", None, "1 s"), ("", "2", "2 s")])
def test_a_copy_delivery_to_a_storage_that_never_answers_is_a_failed_delivery(
    tmp_path: Path, extra: str, env_seconds: str | None, said: str
) -> None:
    root = write_project(tmp_path / "p", {"agents.d/a.yaml": AGENT, "tasks.d/t.yaml": TASK.format(to="hang://bucket/copies/", extra=extra)})
    with ScriptedServer({"fallback": "hi"}) as server:
        done = run_cli(root, server, "run", "t", env=hanging_env(env_seconds), timeout=120)
    assert done.returncode == 5, done.stderr  # completed, but a delivery failed (README's exit codes)
    assert "Traceback" not in done.stderr
    assert f"did not answer within {said}" in done.stderr and "hang://bucket/copies" in done.stderr
    (report,) = (root / "reports" / "t").glob("*/report.json")
    (delivery,) = json.loads(report.read_text())["deliveries"]
    assert delivery["status"] != "delivered"


@pytest.mark.parametrize("value", ["abc", "nan", "-1", "0", "1e400", "inf"])
def test_an_unusable_remote_timeout_is_a_usage_error_naming_the_variable(project: Path, value: str) -> None:
    batch = ("batch", "triage_ticket", "--input", "tickets.jsonl", "--output", "hang://bucket/out.jsonl", "--id-column", "id")
    done = run_cli(project, None, *batch, env=hanging_env(value), timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert f"RUNNER_REMOTE_TIMEOUT_SECONDS={value!r} is not a number of seconds" in done.stderr


def test_bounded_returns_and_raises_what_the_call_does() -> None:
    assert bounded("adding", lambda: 1 + 1, 5) == 2
    with pytest.raises(FileNotFoundError):
        bounded("reading", lambda: open("/nonexistent/x").read(), 5)  # noqa: SIM115
    release = threading.Event()
    try:
        with pytest.raises(RemoteTimedOut, match=r"waiting: the storage did not answer within 0\.2 s") as stopped:
            bounded("waiting", release.wait, 0.2)
        assert isinstance(stopped.value, TimeoutError) and stopped.value.exit_code == 1
    finally:
        release.set()


def test_a_credential_in_the_output_url_is_not_shown_when_the_storage_hangs(project: Path) -> None:
    secret = "sk-storage-secret-0123456789"
    batch = ("batch", "triage_ticket", "--input", "tickets.jsonl", "--output", f"hang://user:{secret}@bucket/out.jsonl",
             "--id-column", "id", "--progress", "none")  # fmt: skip
    done = run_cli(project, None, *batch, env=hanging_env("1"), timeout=120)
    assert done.returncode == 1 and "did not answer within 1 s" in error_line(done)
    assert secret not in done.stderr + done.stdout
