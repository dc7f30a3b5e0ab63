"""Links planted deeper inside the state directory and the default output folders, through the
real CLI: ``.runner/batches``, ``.runner/workspaces``, ``.runner/knowledge``, the run store, a
journal and their SQLite side files (``-wal``, ``-shm``, ``-journal``, ``.lock``), a report
folder a resumed run or ``runner report`` rewrites, an eval's result folder. A symbolic link
leading out of the project (or out of ``$RUNNER_STATE_DIR``) or a hard-linked file is refused
with one line naming the path and the fix, exit 2, no model call, and nothing outside changes.
Links that stay inside the project keep working; the project cache is replaced, not followed."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import pytest

from runner.model.server import ScriptedServer
from tests.support.project import copy_shipped, run_cli, write_project

pytestmark = pytest.mark.timeout(300)
TRIAGE = '{"category": "bug", "urgency": "high", "summary": "It crashes."}'
RUN = ("run", "triage_ticket", "-i", "subject=a", "-i", "body=b")
BATCH = ("batch", "triage_ticket", "--input", "tickets.csv", "--output", "out.jsonl", "--progress", "none")
OUTSIDE_TEXT = "outside the project: must stay as it is\n"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = copy_shipped(tmp_path / "project")
    (root / "tickets.csv").write_text("id,subject,body\n1,a,crash\n")
    return root


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    place = tmp_path / "elsewhere"
    place.mkdir()
    (place / "victim").write_text(OUTSIDE_TEXT)
    return place


def cli(root: Path, *args: str, env: dict[str, str] | None = None, reply: str = TRIAGE) -> subprocess.CompletedProcess[str]:
    with ScriptedServer({"fallback": reply}) as server:
        done = run_cli(root, server, *args, env=env, drop=("RUNNER_",), timeout=240)
        done.stderr += f"\n[model requests: {len(server.requests)}]"
    return done


def refused(done: subprocess.CompletedProcess[str], path: Path, *said: str) -> str:
    assert "Traceback" not in done.stderr, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.lower().startswith("error:")]
    assert len(lines) == 1, done.stderr
    assert done.returncode == 2, done.stderr
    assert str(path) in lines[0], lines[0]
    for text in said:
        assert text in lines[0], lines[0]
    assert "[model requests: 0]" in done.stderr
    return lines[0]


def untouched(outside: Path, *expected: str) -> None:
    assert sorted(p.name for p in outside.iterdir()) == sorted(["victim", *expected])
    assert (outside / "victim").read_text() == OUTSIDE_TEXT


def journal_of(root: Path, task: str = "triage_ticket", input_name: str = "tickets.csv") -> Path:
    key = hashlib.sha256(str((root / input_name).resolve()).encode()).hexdigest()[:12]
    return root / ".runner" / "batches" / f"{task}-{key}.sqlite3"


# --- directories inside the state directory ----------------------------------------------


@pytest.mark.parametrize("command", [RUN, BATCH])
def test_a_batches_or_store_side_link_out_is_refused(project: Path, outside: Path, command: tuple[str, ...]) -> None:
    (project / ".runner").mkdir()
    (project / ".runner" / "batches").symlink_to(outside)
    (project / ".runner" / "runs.sqlite3-wal").symlink_to(outside / "victim")
    done = cli(project, *command)
    link = project / ".runner" / ("batches" if command == BATCH else "runs.sqlite3-wal")
    refused(done, link, "symbolic link", "outside the project", "remove it")
    untouched(outside)


@pytest.mark.parametrize("name", ["runs.sqlite3", "runs.sqlite3-wal", "runs.sqlite3-shm", "runs.sqlite3-journal"])
@pytest.mark.parametrize("command", [RUN, ("runs",), ("stats",)])
def test_a_run_store_file_linked_out_is_refused(project: Path, outside: Path, name: str, command: tuple[str, ...]) -> None:
    (project / ".runner").mkdir()
    (project / ".runner" / name).symlink_to(outside / "victim")
    done = cli(project, *command)
    refused(done, project / ".runner" / name, "symbolic link", str(outside / "victim"))
    untouched(outside)


def test_a_hard_linked_run_store_is_refused(project: Path, outside: Path) -> None:
    assert cli(project, *RUN).returncode == 0
    store = project / ".runner" / "runs.sqlite3"
    os.link(store, outside / "shared.sqlite3")
    before = (outside / "shared.sqlite3").read_bytes()
    for command in (RUN, ("runs",)):
        line = refused(cli(project, *command), store, "hard link", "mv runs.sqlite3.copy runs.sqlite3")
        assert "2 names" in line
    assert (outside / "shared.sqlite3").read_bytes() == before


@pytest.mark.parametrize("suffix", ["", "-wal", ".lock"])
def test_a_journal_file_linked_out_is_refused(project: Path, outside: Path, suffix: str) -> None:
    journal = journal_of(project)
    journal.parent.mkdir(parents=True)
    Path(f"{journal}{suffix}").symlink_to(outside / "victim")
    refused(cli(project, *BATCH), Path(f"{journal}{suffix}"), "batch journals", "symbolic link")
    untouched(outside)


def test_a_hard_linked_journal_lock_is_refused(project: Path, outside: Path) -> None:
    journal = journal_of(project)
    journal.parent.mkdir(parents=True)
    os.link(outside / "victim", f"{journal}.lock")
    refused(cli(project, *BATCH), Path(f"{journal}.lock"), "hard link")
    untouched(outside)


AGENT = "apiVersion: runner/v1\nkind: Agent\nname: a\nmodel: {id: gpt-4o-mini}\n"
WORK_TASK = "apiVersion: runner/v1\nkind: Task\nname: w\nagent: a\nworkspace:\n  files: [notes.txt]\ngoal: Read notes.txt.\n"


def test_a_workspaces_link_out_is_refused(tmp_path: Path, outside: Path) -> None:
    root = write_project(tmp_path / "p", {"agents.d/a.yaml": AGENT, "tasks.d/w.yaml": WORK_TASK, "notes.txt": "n\n"})
    (root / ".runner").mkdir()
    (root / ".runner" / "workspaces").symlink_to(outside)
    done = cli(root, "run", "w", reply="done")
    refused(done, root / ".runner" / "workspaces", "run workspaces", "symbolic link")
    untouched(outside)


KNOWLEDGE = "apiVersion: runner/v1\nkind: Knowledge\nname: product_docs\nsources: [docs]\n"


@pytest.mark.parametrize("link", ["knowledge", "knowledge/product_docs.sqlite3", "knowledge/product_docs.sqlite3-wal"])
def test_a_knowledge_index_link_out_is_refused(tmp_path: Path, outside: Path, link: str) -> None:
    root = write_project(tmp_path / "p", {"knowledge.d/docs.yaml": KNOWLEDGE, "docs/a.md": "# A\n\nAlpha text.\n"})
    planted = root / ".runner" / link
    planted.parent.mkdir(parents=True, exist_ok=True)
    planted.symlink_to(outside if link == "knowledge" else outside / "victim")
    done = run_cli(root, None, "index", drop=("RUNNER_",), timeout=120)
    done.stderr += "\n[model requests: 0]"
    refused(done, planted, "knowledge base 'product_docs'", "symbolic link")
    untouched(outside)


def test_a_link_below_an_explicit_state_dir_that_leads_out_of_it_is_refused(project: Path, outside: Path, tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / "batches").symlink_to(outside)
    done = cli(project, *BATCH, env={"RUNNER_STATE_DIR": str(state)})
    refused(done, state / "batches", f"outside the state directory {state}", "RUNNER_STATE_DIR")
    untouched(outside)


def test_links_that_stay_inside_the_project_are_followed(project: Path) -> None:
    (project / "kept" / "batches").mkdir(parents=True)
    (project / ".runner").mkdir()
    (project / ".runner" / "batches").symlink_to(project / "kept" / "batches")
    done = cli(project, *BATCH)
    assert done.returncode == 0, done.stderr
    assert list((project / "kept" / "batches").glob("triage_ticket-*.sqlite3"))


def test_the_project_cache_file_linked_out_is_replaced_not_followed(project: Path, outside: Path) -> None:
    (project / ".runner").mkdir()
    assert run_cli(project, None, "validate", drop=("RUNNER_",)).returncode == 0
    cache = project / ".runner" / "project-cache.json"
    assert cache.is_file()
    cache.unlink()
    cache.symlink_to(outside / "victim")
    done = run_cli(project, None, "validate", drop=("RUNNER_",))
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    untouched(outside)
    os.link(outside / "victim", outside / "hard")
    cache.unlink()
    os.link(outside / "victim", cache)  # a hard link: rewritten by a rename, the other name keeps its text
    assert run_cli(project, None, "validate", drop=("RUNNER_",)).returncode == 0
    untouched(outside, "hard")


# --- default output folders ------------------------------------------------------------


def test_a_resumed_runs_report_folder_linked_out_is_refused_before_any_call(project: Path, outside: Path) -> None:
    run_id = "triage_ticket-resumed-1"
    folder = project / "reports" / "triage_ticket" / run_id
    folder.parent.mkdir(parents=True)
    folder.symlink_to(outside)
    done = cli(project, *RUN, "--run-id", run_id)
    refused(done, folder, "run reports", "--reports-dir")
    untouched(outside)


def test_a_report_file_in_a_run_folder_hard_linked_is_refused(project: Path, outside: Path) -> None:
    run_id = "triage_ticket-resumed-2"
    folder = project / "reports" / "triage_ticket" / run_id
    folder.mkdir(parents=True)
    os.link(outside / "victim", folder / "report.md")
    refused(cli(project, *RUN, "--run-id", run_id), folder / "report.md", "hard link")
    untouched(outside)


@pytest.mark.parametrize("how", ["folder", "file"])
def test_runner_report_into_a_folder_linked_out_is_refused(project: Path, outside: Path, how: str) -> None:
    done = cli(project, *RUN)
    assert done.returncode == 0, done.stderr
    (folder,) = (project / "reports" / "triage_ticket").iterdir()
    if how == "folder":
        for item in folder.iterdir():
            item.unlink()
        folder.rmdir()
        folder.symlink_to(outside)
        planted = folder
    else:
        planted = folder / "report.json"
        planted.unlink()
        planted.symlink_to(outside / "victim")
    again = run_cli(project, None, "report", folder.name, drop=("RUNNER_",), timeout=120)
    again.stderr += "\n[model requests: 0]"
    refused(again, planted, "the run's report", "--out")
    untouched(outside)
    elsewhere = project.parent / "rendered"
    assert run_cli(project, None, "report", folder.name, "--out", str(elsewhere), drop=("RUNNER_",)).returncode == 0
    assert (elsewhere / "report.json").is_file()


EVAL_AGENT = "apiVersion: runner/v1\nkind: Agent\nname: labeler\nmodel: {id: gpt-4o-mini}\n"
EVAL_TASK = "apiVersion: runner/v1\nkind: Task\nname: label\nagent: labeler\ninputs:\n  text: {type: string}\ngoal: \"Label: {{ inputs.text }}\"\n"
EVAL = "apiVersion: runner/v1\nkind: Eval\nname: acc\ntask: label\ndataset:\n  path: data/cases.csv\n  id_column: id\nassert:\n  - {path: label, equals: {column: expected}}\n"


@pytest.mark.parametrize("link", ["reports/evals", "reports/evals/acc", "reports/evals/acc/default", "reports/evals/acc/eval_report.md",
                                  "reports/evals/acc/default/output.jsonl"])  # fmt: skip
def test_an_eval_result_folder_with_a_link_out_is_refused(tmp_path: Path, outside: Path, link: str) -> None:
    root = write_project(tmp_path / "p", {"agents.d/a.yaml": EVAL_AGENT, "tasks.d/t.yaml": EVAL_TASK, "evals.d/e.yaml": EVAL,
                                          "data/cases.csv": "id,text,expected\nc1,hello,greeting\n"})  # fmt: skip
    planted = root / link
    planted.parent.mkdir(parents=True, exist_ok=True)
    planted.symlink_to(outside / "victim" if planted.suffix else outside)
    done = cli(root, "eval", "acc", reply='{"label": "greeting"}')
    refused(done, planted, "eval results", "--out")
    untouched(outside)


# --- lock files next to files the user named, and agent memory ---------------------------


@pytest.mark.parametrize("how", ["symbolic", "hard"])
def test_an_output_lock_linked_elsewhere_is_refused(project: Path, outside: Path, how: str) -> None:
    lock = project / ".out.jsonl.lock"
    if how == "symbolic":
        lock.symlink_to(outside / "victim")
    else:
        os.link(outside / "victim", lock)
    refused(cli(project, *BATCH), lock, "the output's lock", "remove it")
    untouched(outside)


def test_a_journal_lock_link_next_to_an_explicit_journal_is_refused(project: Path, outside: Path) -> None:
    journal = project / "my-journal.sqlite3"
    Path(f"{journal}.lock").symlink_to(outside / "created-through-the-link")  # dangling: O_CREAT would make it
    refused(cli(project, *BATCH, "--journal", str(journal)), Path(f"{journal}.lock"), "symbolic link")
    untouched(outside)


MEMORY_AGENT = "apiVersion: runner/v1\nkind: Agent\nname: a\nmodel: {id: gpt-4o-mini}\ntools: [remember, recall]\nmemory: {scope: task}\n"
MEMORY_TASK = "apiVersion: runner/v1\nkind: Task\nname: m\nagent: a\ngoal: Remember something.\n"


@pytest.mark.parametrize("how", ["symbolic", "hard"])
def test_an_agent_memory_file_linked_out_is_refused(tmp_path: Path, outside: Path, how: str) -> None:
    root = write_project(tmp_path / "p", {"agents.d/a.yaml": MEMORY_AGENT, "tasks.d/m.yaml": MEMORY_TASK})
    memory = root / ".runner" / "memory.sqlite3"
    memory.parent.mkdir()
    if how == "symbolic":
        memory.symlink_to(outside / "victim")
    else:
        os.link(outside / "victim", memory)
    refused(cli(root, "run", "m", "--no-report", reply="ok"), memory, "agent memory")
    untouched(outside)


@pytest.mark.parametrize("link", ["workspaces", "workspaces/w-kept-1"])
def test_a_workspace_link_to_another_project_folder_is_refused_not_wiped(tmp_path: Path, link: str) -> None:
    root = write_project(tmp_path / "p", {"agents.d/a.yaml": AGENT, "tasks.d/w.yaml": WORK_TASK, "notes.txt": "n\n"})
    planted = root / ".runner" / link
    planted.parent.mkdir(parents=True)
    planted.symlink_to(root / "agents.d")  # inside the project, but a resumed run wipes its workspace
    with ScriptedServer({"fallback": "done"}) as server:
        done = run_cli(root, server, "run", "w", "--run-id", "w-kept-1", drop=("RUNNER_",), timeout=240)
        done.stderr += f"\n[model requests: {len(server.requests)}]"
    refused(done, planted, "run workspaces", "follows no link")
    assert (root / "agents.d" / "a.yaml").read_text() == AGENT
