"""A local store file that cannot be used, through the real CLI: garbage, truncated, a
directory, from a newer runner, read-only, locked by another process; the batch journal too.
Each is one line naming the file and the fix, with its documented exit code (2: the file needs
a person; 1: locked, a later try may succeed), no traceback, and the file left as it was (its
old rows are not lost)."""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from runner.model.server import ScriptedServer
from runner.store.runstore import RunStore
from tests.support.other_user import as_user, can_start_as, system_user
from tests.support.project import copy_shipped, run_cli
from tests.support.services import requires

pytestmark = pytest.mark.timeout(240)
TRIAGE = '{"category": "bug", "urgency": "high", "summary": "It crashes."}'
BRIEF_WAIT = {"RUNNER_STORE_BUSY_SECONDS": "2"}  # how long a command waits for the lock (default 30 s)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = copy_shipped(tmp_path / "project")
    (root / "tickets.jsonl").write_text("".join(
        json.dumps({"id": f"T{i}", "subject": "crash", "body": f"It crashes ({i})."}) + "\n" for i in range(2)
    ))  # fmt: skip
    return root


def store_with_rows(path: Path, runs: int = 40) -> None:
    """A real run store with ``runs`` started runs (enough pages that a cut loses some)."""
    store = RunStore(path)
    for i in range(runs):
        store.start_run(f"run-{i:03d}", "triage_ticket", {"subject": "s" * 500, "i": i}, "hash", {})
    store.close()
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "dir"


def runner(
    root: Path, *args: str, server: ScriptedServer | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return run_cli(root, server, *args, env=env, drop=("RUNNER_",), timeout=200)


def one_error_line(done: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in done.stderr, done.stderr
    (line,) = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    return line


def damage(path: Path, how: str) -> None:
    if how == "garbage":
        path.write_bytes(random.Random(7).randbytes(8192))
    elif how == "truncated":
        store_with_rows(path)
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 3])
    elif how == "directory":
        path.mkdir(parents=True)
        (path / "inside").write_text("x")
    elif how == "zero pages header":
        store_with_rows(path, runs=2)
        data = bytearray(path.read_bytes())
        data[:16] = b"not sqlite here!"
        path.write_bytes(bytes(data))


@pytest.mark.parametrize("how", ["garbage", "truncated", "directory", "zero pages header"])
@pytest.mark.parametrize("command", [("runs",), ("runs", "show", "run-001"), ("stats",)])
def test_a_damaged_run_store_is_named_with_the_fix_and_kept(project: Path, how: str, command: tuple[str, ...]) -> None:
    store = project / ".runner" / "runs.sqlite3"
    store.parent.mkdir()
    damage(store, how)
    before = digest(store)
    done = runner(project, *command)
    line = one_error_line(done)
    assert done.returncode == 2, done.stderr
    assert str(store) in line and ("move it away" in line) and "(the run store)" in line
    assert digest(store) == before  # nothing deleted or rewritten: the rows are there for recovery


def test_a_run_on_a_damaged_store_stops_before_calling_the_model(project: Path) -> None:
    store = project / ".runner" / "runs.sqlite3"
    store.parent.mkdir()
    damage(store, "garbage")
    with ScriptedServer({"fallback": TRIAGE}) as server:
        done = runner(project, "run", "triage_ticket", "-i", "subject=a", "-i", "body=b", server=server)
        assert not server.requests
    assert done.returncode == 2 and "is not a readable SQLite database" in one_error_line(done)


def test_a_zero_byte_store_is_a_new_store(project: Path) -> None:
    store = project / ".runner" / "runs.sqlite3"
    store.parent.mkdir()
    store.write_bytes(b"")
    done = runner(project, "runs")
    assert done.returncode == 0, done.stderr


def test_a_store_from_a_newer_runner_is_refused_and_kept(project: Path) -> None:
    store = project / ".runner" / "runs.sqlite3"
    store.parent.mkdir()
    store_with_rows(store, runs=2)
    with sqlite3.connect(store) as db:
        db.execute("PRAGMA user_version = 999")
    done = runner(project, "runs")
    line = one_error_line(done)
    assert done.returncode == 2 and "written by a newer runner (store version 999" in line and "upgrade runner" in line
    with sqlite3.connect(store) as db:  # untouched: its version and rows as they were
        assert db.execute("PRAGMA user_version").fetchone()[0] == 999
        assert db.execute("SELECT count(*) FROM runs").fetchone()[0] == 2


def test_the_store_is_stamped_and_an_old_unstamped_store_keeps_its_rows(project: Path) -> None:
    store = project / ".runner" / "runs.sqlite3"
    store.parent.mkdir()
    store_with_rows(store, runs=3)
    with sqlite3.connect(store) as db:
        db.execute("PRAGMA user_version = 0")  # as earlier runners left it
    done = runner(project, "runs")
    assert done.returncode == 0 and done.stdout.count("run-00") == 3
    with sqlite3.connect(store) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] >= 1


@pytest.fixture
def held(project: Path) -> Iterator[Path]:
    """The run store, exclusively locked by another process until the test ends."""
    store = project / ".runner" / "runs.sqlite3"
    store.parent.mkdir()
    store_with_rows(store, runs=1)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sqlite3, sys; db = sqlite3.connect(sys.argv[1], isolation_level=None); "
         "db.execute('BEGIN EXCLUSIVE'); print('held', flush=True); sys.stdin.read()", str(store)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    try:
        yield store
    finally:
        holder.kill()
        holder.communicate()


def test_a_store_locked_by_another_process_is_a_clear_retryable_error(held: Path) -> None:
    assert runner(held.parents[1], "runs").returncode == 0  # a command that only reads opens it read-only: no lock needed
    done = runner(held.parents[1], "runs", "prune", "--older-than", "30d", env=BRIEF_WAIT)
    line = one_error_line(done)
    assert done.returncode == 1 and str(held) in line and "is locked by another process" in line and "run again" in line
    assert "(waited 2 s:" in line  # how long it waited: $RUNNER_STORE_BUSY_SECONDS


@pytest.mark.parametrize("value", ["soon", "-1", "nan"])
def test_a_bad_store_wait_is_refused_naming_the_variable(project: Path, value: str) -> None:
    (project / ".runner").mkdir()
    store_with_rows(project / ".runner" / "runs.sqlite3", runs=1)
    done = runner(project, "runs", "prune", "--older-than", "30d", env={"RUNNER_STORE_BUSY_SECONDS": value})
    line = one_error_line(done)
    assert done.returncode == 2 and f"RUNNER_STORE_BUSY_SECONDS={value!r} is not a number of seconds" in line, line


NOBODY = system_user("nobody")
CAN_START_AS_NOBODY = can_start_as(NOBODY)
REPO = Path(__file__).resolve().parents[2]


RUN = ("run", "triage_ticket", "-i", "subject=a", "-i", "body=b", "--no-report")


def as_nobody(root: Path, *command: str) -> tuple[subprocess.CompletedProcess[str], int]:
    """``runner COMMAND`` started as user nobody in ``root`` (the interpreter and this checkout
    reachable, see :mod:`tests.support.other_user`); with the model calls it made."""
    assert NOBODY is not None
    with ScriptedServer({"fallback": TRIAGE}) as server:
        env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(REPO), "OPENAI_BASE_URL": server.base_url,
               "OPENAI_API_KEY": "sk-read-only-store-0123", **NOBODY.env()}  # fmt: skip
        done = subprocess.run(as_user(NOBODY, [sys.executable, "-m", "runner", *command], read_only=[REPO]),
                              cwd=root, capture_output=True, text=True, timeout=180, env=env)  # fmt: skip
        return done, len(server.requests)


@pytest.fixture
def open_project() -> Iterator[Path]:
    """A project with a run store of one run, under ``/tmp`` (pytest's directories are 0700:
    user nobody must read it), everything root's and readable by all."""
    base = Path(tempfile.mkdtemp(prefix="runner-ro-"))
    try:
        root = copy_shipped(base / "project")
        store = root / ".runner" / "runs.sqlite3"
        store.parent.mkdir()
        store_with_rows(store, runs=1)
        for path in [base, *base.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        yield root
    finally:
        shutil.rmtree(base)


@requires(CAN_START_AS_NOBODY, "starts the CLI as user nobody: needs root, bwrap and setpriv")
def test_a_read_only_state_dir_is_named_with_the_fix(open_project: Path) -> None:
    state = open_project / ".runner"
    before = digest(state / "runs.sqlite3")
    done, calls = as_nobody(open_project, *RUN)
    line = one_error_line(done)
    assert done.returncode == 2 and f"cannot write {state} (the runner's local state: the run store)" in line, line
    assert "Permission denied for user nobody" in line and "RUNNER_STATE_DIR" in line, line
    assert calls == 0 and digest(state / "runs.sqlite3") == before
    listed, _ = as_nobody(open_project, "runs")  # reading it needs no write
    assert listed.returncode == 0 and "run-000" in listed.stdout, listed.stderr
    assert digest(state / "runs.sqlite3") == before


@requires(CAN_START_AS_NOBODY, "starts the CLI as user nobody: needs root, bwrap and setpriv")
def test_a_read_only_store_file_is_named_with_the_fix(open_project: Path) -> None:
    assert NOBODY is not None
    state = open_project / ".runner"
    os.chown(state, NOBODY.uid, NOBODY.gid)  # the directory is the user's, the store file is not
    store = state / "runs.sqlite3"
    before = digest(store)
    done, calls = as_nobody(open_project, *RUN)
    line = one_error_line(done)
    assert done.returncode == 2 and f"{store} (the run store) cannot be written" in line and "RUNNER_STATE_DIR" in line, line
    assert calls == 0 and digest(store) == before


BATCH = ("batch", "triage_ticket", "--input", "tickets.jsonl", "--output", "out.jsonl", "--id-column", "id", "--progress", "none")


def journal_of(project: Path) -> Path:
    (journal,) = (project / ".runner" / "batches").glob("*.sqlite3")
    return journal


def test_a_damaged_journal_names_restart_and_restart_starts_over(project: Path) -> None:
    with ScriptedServer({"fallback": TRIAGE}) as server:
        assert runner(project, *BATCH, server=server).returncode == 0
        journal = journal_of(project)
        journal.write_bytes(random.Random(3).randbytes(4096))
        for suffix in ("-wal", "-shm"):
            Path(f"{journal}{suffix}").unlink(missing_ok=True)
        before = digest(journal)
        done = runner(project, *BATCH, server=server)
        line = one_error_line(done)
        assert done.returncode == 2 and str(journal) in line and "(the batch journal)" in line and "--restart" in line
        assert digest(journal) == before
        again = runner(project, *BATCH, "--restart", server=server)
    assert again.returncode == 0, again.stderr


def test_a_journal_from_a_newer_runner_says_so(project: Path) -> None:
    with ScriptedServer({"fallback": TRIAGE}) as server:
        assert runner(project, *BATCH, server=server).returncode == 0
        with sqlite3.connect(journal_of(project)) as db:
            db.execute("UPDATE batch SET value = '99' WHERE key = 'schema_version'")
        done = runner(project, *BATCH, server=server)
    line = one_error_line(done)
    assert done.returncode == 2 and "written by a newer runner (journal schema 99" in line and "--restart" in line
