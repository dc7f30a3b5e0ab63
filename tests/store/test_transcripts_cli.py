"""Full transcripts through the real CLI and the loopback OpenAI-protocol server, on both store
backends: a run's every request, tool list, response and tool output can be read back after the
fact (``runner runs show ID --transcript``, ``--json``, report.html) with its secrets redacted;
shared content is stored once; ``runner runs prune`` deletes old runs and their blobs only."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from runner.model.server import ScriptedServer
from runner.store.runstore import RunStore
from tests.support.project import copy_project

pytestmark = pytest.mark.timeout(300)
REPO = Path(__file__).resolve().parents[2]
CANARY = "sk-canary-7f3a9c2e5d1b4a60"
SYSTEM = "You are careful."


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


SCRIPT = {"rules": [
    {"when": {"last_role": "user"}, "times": 1, "reply": call("write_file", path="note.txt", content=f"key={CANARY}\nline two")},
    {"when": {"last_role": "tool"}, "times": 1, "reply": call("read_file", path="note.txt")},
    {"when": {"last_role": "tool"}, "reply": {"content": f"The note holds {CANARY}.", "usage": {
        "prompt_tokens": 300, "completion_tokens": 9, "cached_tokens": 128}}},
]}  # fmt: skip


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return copy_project(REPO / "tests" / "runs" / "project", tmp_path / "project")


class Cli:
    """The real ``runner`` command against one project and one store (an SQLite file or PostgreSQL)."""

    def __init__(self, project: Path, target: str | Path):
        self.project, self.target = project, target

    def __call__(self, *args: str, server: ScriptedServer | None = None) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI", "RUNNER_"))}
        env["PYTHONPATH"] = str(REPO)
        if isinstance(self.target, str):
            env["RUNNER_STORE_URL"] = self.target
        if server is not None:
            env.update(OPENAI_BASE_URL=server.base_url, OPENAI_API_KEY=CANARY)
        return subprocess.run([sys.executable, "-m", "runner", *args], cwd=self.project, env=env, capture_output=True,
                              text=True, timeout=240, check=False)  # fmt: skip

    def store(self) -> RunStore:
        return RunStore(self.target)

    def run(self, server: ScriptedServer, a: int, run_id: str) -> subprocess.CompletedProcess[str]:
        done = self("run", "sum", "-i", f"a={a}", "--run-id", run_id, server=server)
        assert done.returncode == 0, done.stderr
        return done


@pytest.fixture
def cli(project: Path, backend: str, request: pytest.FixtureRequest) -> Cli:
    target = project / ".runner" / "runs.sqlite3" if backend == "sqlite" else str(request.getfixturevalue("postgres_url"))
    return Cli(project, target)


def everything_stored(cli: Cli) -> str:
    """Every byte of the store as text: the SQLite files, or every row of every PostgreSQL table."""
    if isinstance(cli.target, Path):
        return "".join(p.read_bytes().decode("utf-8", "replace") for p in cli.target.parent.glob("runs.sqlite3*"))
    import psycopg

    with psycopg.connect(cli.target) as db:
        tables = [r[0] for r in db.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")]
        return "\n".join(str(row) for t in tables for row in db.execute(f'SELECT t::text FROM "{t}" t'))


def test_a_runs_whole_transcript_reads_back_redacted(cli: Cli) -> None:
    with ScriptedServer(SCRIPT) as server:
        cli.run(server, 3, "canary-run")
    shown = cli("runs", "show", "canary-run", "--transcript")
    as_json = cli("runs", "show", "canary-run", "--transcript", "--json")
    assert shown.returncode == 0 and as_json.returncode == 0, shown.stderr + as_json.stderr
    entries = json.loads(as_json.stdout)["entries"]
    assert [(e["kind"], e.get("name")) for e in entries] == [
        ("model", None), ("tool", "write_file"), ("model", None), ("tool", "read_file"), ("model", None)
    ]
    first, last = entries[0], entries[-1]
    assert first["messages"][0] == {"role": "system", "content": SYSTEM}
    assert first["messages"][1]["content"] == "What is 3 + 2?"
    assert {t["function"]["name"] for t in first["tools"]} == {"calculator", "write_file", "read_file", "terminate"}
    assert first["response"]["tool_calls"][0]["function"]["name"] == "write_file"
    assert len(last["messages"]) == 6 and last["messages"][-1]["role"] == "tool"
    assert last["response"]["content"] == "The note holds [REDACTED]." and last["response"]["finish_reason"] == "stop"
    assert last["usage"]["cached_input_tokens"] == 128
    read = entries[3]
    assert read["output"].startswith("key=[REDACTED]\nline two") and read["truncated"] is False
    assert "[REDACTED]" in entries[2]["messages"][2]["tool_calls"][0]["function"]["arguments"]
    # readable: each call shows only what its conversation had not sent before
    assert "=== model call 1" in shown.stdout and "[system] You are careful." in shown.stdout
    assert shown.stdout.count("[system] You are careful.") == 1 and "(4 earlier messages, as sent before)" in shown.stdout
    assert "-> read_file(" in shown.stdout and "tools offered: calculator, write_file, read_file, terminate" in shown.stdout
    assert "128 cached" in shown.stdout and "128 cached" in cli("runs", "show", "canary-run").stdout
    report = next((cli.project / "reports" / "sum" / "canary-run").glob("report.html")).read_text()
    assert '<section id="transcript">' in report and "<details class=\"transcript\">" in report
    assert "key=[REDACTED]" in report and "You are careful." in report
    report_json = (cli.project / "reports" / "sum" / "canary-run" / "report.json").read_text()
    assert "You are careful." not in report_json  # the transcript stays out of report.json
    rerendered = cli("report", "canary-run", "--out", "again", "--format", "html")
    assert rerendered.returncode == 0 and "key=[REDACTED]" in (cli.project / "again" / "report.html").read_text()
    for where, text in (
        ("store", everything_stored(cli)), ("transcript", shown.stdout + as_json.stdout),
        ("reports", "".join(p.read_text(errors="replace") for p in cli.project.rglob("report*.*") if p.is_file())),
    ):  # fmt: skip
        assert CANARY not in text, f"the canary key reached the {where}"


def test_control_characters_in_a_transcript_are_escaped_on_the_terminal(cli: Cli) -> None:
    script = {"fallback": {"content": "done \x1b]0;owned\x07 \x1b[2J \u202e <script>alert(1)</script>"}}
    with ScriptedServer(script) as server:
        cli.run(server, 1, "escapes")
    shown = cli("runs", "show", "escapes", "--transcript")
    assert shown.returncode == 0, shown.stderr
    assert "\x1b" not in shown.stdout and "\u202e" not in shown.stdout and "\\x1b]0;owned\\x07" in shown.stdout
    as_json = cli("runs", "show", "escapes", "--transcript", "--json")
    assert "\x1b" not in as_json.stdout and "\u202e" not in as_json.stdout
    assert json.loads(as_json.stdout)["entries"][0]["response"]["content"].startswith("done \x1b]0;owned\x07")
    page = (cli.project / "reports" / "sum" / "escapes" / "report.html").read_text()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "<script>alert" not in page


def test_a_failed_calls_request_is_kept_with_its_error(cli: Cli) -> None:
    with ScriptedServer({"fallback": {"fault": {"status": 400, "body": "bad request here"}}}) as server:
        done = cli("run", "sum", "-i", "a=1", "--run-id", "failing", server=server)
    assert done.returncode == 1, done.stderr
    entries = json.loads(cli("runs", "show", "failing", "--transcript", "--json").stdout)["entries"]
    assert entries and entries[0]["response"] is None and entries[0]["status"] == "error"
    assert entries[0]["messages"][1]["content"] == "What is 1 + 2?" and entries[0]["error_kind"] == "bad_request"
    assert "--> error:" in cli("runs", "show", "failing", "--transcript").stdout


def test_shared_content_is_stored_once(cli: Cli) -> None:
    with ScriptedServer(SCRIPT) as server:
        cli.run(server, 1, "first")
    with ScriptedServer(SCRIPT) as server:
        cli.run(server, 2, "second")
    store = cli.store()
    try:
        system = store.database.rows("SELECT digest FROM transcript_blobs WHERE body = ?", (json.dumps(
            {"content": SYSTEM, "role": "system"}, separators=(",", ":")),))  # fmt: skip
        tool_lists = store.database.rows("SELECT digest FROM transcript_blobs WHERE body LIKE ?", ('[{"function":%',))
        first, second = store.transcripts.read("first"), store.transcripts.read("second")
    finally:
        store.close()
    assert len(system) == 1 and len(tool_lists) == 1  # two runs, six model calls: one system prompt, one tools list
    assert first[0]["message_digests"][0] == second[0]["message_digests"][0] == system[0]["digest"]
    assert first[0]["messages"][1]["content"] == "What is 1 + 2?" and second[0]["messages"][1]["content"] == "What is 2 + 2?"


def age_run(cli: Cli, run_id: str, days: int) -> None:
    store = cli.store()
    try:  # a run of long ago: nothing else can make one without waiting
        store.database.execute(
            "UPDATE runs SET started_at = ?, finished_at = ? WHERE run_id = ?",
            (f"2020-01-{days:02d}T00:00:00.000+00:00", f"2020-01-{days:02d}T00:01:00.000+00:00", run_id),
        )
    finally:
        store.close()


def test_prune_deletes_old_runs_and_their_unshared_blobs(cli: Cli) -> None:
    with ScriptedServer(SCRIPT) as server:
        cli.run(server, 1, "old-run")
    with ScriptedServer(SCRIPT) as server:
        cli.run(server, 2, "new-run")
    age_run(cli, "old-run", 5)
    store = cli.store()
    blobs_before = store.transcripts.blob_count()
    store.close()

    dry = cli("runs", "prune", "--older-than", "30d", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "would delete 1 run(s)" in dry.stdout and "kept 1 run(s)" in dry.stdout
    assert cli("runs", "show", "old-run").returncode == 0  # a dry run deletes nothing

    pruned = cli("runs", "prune", "--older-than", "30d", "--json")
    assert pruned.returncode == 0, pruned.stderr
    summary = json.loads(pruned.stdout)
    assert summary["runs"] == 1 and summary["kept_runs"] == 1 and summary["dry_run"] is False
    assert summary["rows"]["model_calls"] == 3 and summary["rows"]["tool_calls"] == 2
    assert summary["rows"]["transcript_entries"] == 5 and summary["blobs"] > 0

    gone = cli("runs", "show", "old-run")
    assert gone.returncode == 2 and "no run 'old-run'" in gone.stderr
    store = cli.store()
    try:
        kept = store.transcripts.read("new-run")
        assert store.transcripts.blob_count() == blobs_before - summary["blobs"]
        assert not store.database.rows("SELECT * FROM transcript_blobs WHERE body LIKE ?", ("%What is 1 + 2?%",))
        for table in ("steps", "model_calls", "tool_calls", "transcript_entries", "transcript_refs"):
            assert not store.database.rows(f"SELECT run_id FROM {table} WHERE run_id = ?", ("old-run",))
    finally:
        store.close()
    assert kept[0]["messages"][0] == {"role": "system", "content": SYSTEM}  # shared with the pruned run, still here
    assert all(m is not None for e in kept if e["kind"] == "model" for m in e["messages"])
    again = cli("runs", "prune", "--older-than", "30d")
    assert again.returncode == 0 and "deleted 0 run(s)" in again.stdout


@pytest.mark.parametrize("age", ["30", "thirty days", "0d", "-3d", "30y", "99999999999999999999d"])
def test_prune_refuses_an_age_it_cannot_read(project: Path, age: str) -> None:
    done = Cli(project, project / ".runner" / "runs.sqlite3")("runs", "prune", "--older-than", age)
    assert done.returncode == 2 and "--older-than" in done.stderr and "Traceback" not in done.stderr


def test_prune_without_a_store_is_a_usage_error(project: Path) -> None:
    done = Cli(project, project / ".runner" / "runs.sqlite3")("runs", "prune", "--older-than", "30d")
    assert done.returncode == 2 and "no run store" in done.stderr and "Traceback" not in done.stderr
