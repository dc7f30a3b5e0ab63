"""A call cut by a crash keeps its request in the transcript: the request is written (redacted,
deduplicated) with the call's write-ahead ledger row, before it is sent. A real ``runner run``
is killed with SIGKILL while the loopback server holds its model call; ``runner runs show
--transcript`` then shows what was sent, and a resumed attempt reuses the stored messages."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from runner.model.server import ScriptedServer
from runner.reports.transcript import CUT_SHORT

REPO = Path(__file__).resolve().parents[2]
KEY = "sk-test-crash-transcript-4d2a9"
AGENT = "apiVersion: runner/v1\nkind: Agent\nname: writer\nmodel: {id: scripted}\nsystem_prompt: You write carefully.\n"
TASK = "apiVersion: runner/v1\nkind: Task\nname: note\nagent: writer\ninputs:\n  topic: {type: string}\ngoal: \"Write about {{ inputs.topic }}.\"\n"


def environ(server: ScriptedServer) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI", "OTEL_"))}
    env.update(PYTHONPATH=str(REPO), OPENAI_BASE_URL=server.base_url, OPENAI_API_KEY=KEY)
    return env


def project(root: Path) -> Path:
    (root / "agents.d").mkdir(parents=True)
    (root / "tasks.d").mkdir()
    (root / "agents.d" / "writer.yaml").write_text(AGENT)
    (root / "tasks.d" / "note.yaml").write_text(TASK)
    return root


def killed_mid_call(root: Path, server: ScriptedServer, *args: str) -> None:
    """Start ``runner run``, wait until the server holds its model call, then SIGKILL it."""
    process = subprocess.Popen([sys.executable, "-m", "runner", "run", "note", *args], cwd=root, env=environ(server),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not server.requests:
            assert process.poll() is None, "the run ended before its call reached the server"
            assert time.monotonic() < deadline, "the call never reached the server"
            time.sleep(0.05)
    finally:
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=60)
    assert process.returncode == -signal.SIGKILL


def show(root: Path, server: ScriptedServer, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "runner", "runs", "show", "crash-1", "--transcript", *args], cwd=root,
                          env=environ(server), capture_output=True, text=True, timeout=120)  # fmt: skip


def test_the_request_of_a_call_cut_by_kill_9_is_in_the_transcript(tmp_path: Path) -> None:
    root = project(tmp_path / "p")
    topic = f"rivers (my key is {KEY})"
    with ScriptedServer({"rules": [{"times": 1, "reply": {"hang_seconds": 120}}], "fallback": "Rivers flow."}) as server:
        killed_mid_call(root, server, "--run-id", "crash-1", "-i", f"topic={topic}")
        text = show(root, server)
        data = show(root, server, "--json")
    assert text.returncode == 0 and "Traceback" not in text.stderr, text.stderr
    assert "[system] You write carefully." in text.stdout
    assert "[user] Write about rivers (my key is [REDACTED])." in text.stdout
    assert f"--> {CUT_SHORT}" in text.stdout and "reserved" in text.stdout
    (entry,) = json.loads(data.stdout)["entries"]
    assert entry["status"] == "reserved" and entry["response"] is None and entry["call_id"] is not None
    assert [m["role"] for m in entry["messages"]] == ["system", "user"]
    for stored in (root / ".runner").glob("runs.sqlite3*"):  # the database and its write-ahead log
        assert KEY.encode() not in stored.read_bytes(), stored


def test_the_resumed_attempt_settles_its_own_entry_and_reuses_the_stored_messages(tmp_path: Path) -> None:
    root = project(tmp_path / "p")
    with ScriptedServer({"rules": [{"times": 1, "reply": {"hang_seconds": 120}}], "fallback": "Rivers flow."}) as server:
        killed_mid_call(root, server, "--run-id", "crash-1", "-i", "topic=rivers")
        resumed = subprocess.run([sys.executable, "-m", "runner", "run", "note", "--run-id", "crash-1", "-i", "topic=rivers"],
                                 cwd=root, env=environ(server), capture_output=True, text=True, timeout=120)  # fmt: skip
        assert resumed.returncode == 0, resumed.stderr[-2000:]
        entries: list[dict[str, Any]] = json.loads(show(root, server, "--json").stdout)["entries"]
    assert [(e["attempt"], e["status"]) for e in entries] == [(1, "reserved"), (2, "ok")]
    assert entries[1]["response"]["content"] == "Rivers flow."
    assert entries[0]["message_digests"] == entries[1]["message_digests"]  # the same request ...
    with sqlite3.connect(root / ".runner" / "runs.sqlite3") as db:
        (blobs,) = db.execute("SELECT COUNT(*) FROM transcript_blobs").fetchone()
        (calls,) = db.execute("SELECT COUNT(*) FROM transcript_entries WHERE run_id = 'crash-1'").fetchone()
    assert calls == 2 and blobs == 2  # ... stored once: the system prompt and the goal
