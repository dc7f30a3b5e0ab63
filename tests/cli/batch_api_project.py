"""Shared by the ``runner batch --via batch-api`` CLI tests: running the CLI as a process
against the loopback server, and reading what the server was sent."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from runner.model.server import ScriptedServer
from tests.support.project import runner_env

PRICE_IN, PRICE_OUT = 0.15, 0.60  # gpt-4o-mini, the shipped prices (USD per million tokens)
TRIAGE = {"category": "bug", "urgency": "high", "summary": "It crashes."}
TRIAGE_SCRIPT: dict[str, Any] = {
    "fallback": {"content": json.dumps(TRIAGE), "usage": {"prompt_tokens": 100, "completion_tokens": 20}}
}
"""Every call answered with the shipped triage_ticket task's output, at 100 + 20 tokens."""


def live_cost(prompt_tokens: int, completion_tokens: int) -> float:
    return (prompt_tokens * PRICE_IN + completion_tokens * PRICE_OUT) / 1_000_000


def command(root: Path, server: ScriptedServer, task: str, *args: str) -> tuple[list[str], dict[str, str]]:
    return [sys.executable, "-m", "runner", "batch", task, *args], runner_env(server, key="sk-test-batch-api")


def run(root: Path, server: ScriptedServer, task: str, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    argv, env = command(root, server, task, *args)
    return subprocess.run(argv, cwd=root, env=env, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def via_api(source: Path, out: Path, *extra: str) -> tuple[str, ...]:
    return ("--input", str(source), "--output", str(out), "--id-column", "id", "--via", "batch-api",
            "--batch-poll-seconds", "0.01", "--progress", "none", *extra)  # fmt: skip


def tickets(root: Path, count: int) -> Path:
    """``count`` tickets ``t1``.. for the shipped triage_ticket task, in ``root/tickets.jsonl``."""
    rows = [{"id": f"t{i}", "subject": f"Ticket {i}", "body": f"It crashes {i}"} for i in range(1, count + 1)]
    return write_rows(root / "tickets.jsonl", rows)


def triage(root: Path, server: ScriptedServer, *args: str) -> subprocess.CompletedProcess[str]:
    """``runner batch triage_ticket ARGS`` in ``root``."""
    return run(root, server, "triage_ticket", *args)


def write_rows(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def records(path: Path) -> dict[str, dict[str, Any]]:
    return {r["id"]: r for r in map(json.loads, path.read_text().splitlines())}


def chat_calls(server: ScriptedServer) -> list[Any]:
    """Requests sent live (not through a provider batch)."""
    return [r for r in server.requests if r.path.endswith("/chat/completions")]


def batch_inputs(server: ScriptedServer) -> list[list[dict[str, Any]]]:
    """The request lines of each provider batch created, in the order they were created."""
    files = server.batches.files
    ordered = sorted(server.batches.batches.values(), key=lambda b: b.id)
    return [[json.loads(text) for text in files[b.input_file_id].content.decode().splitlines()] for b in ordered]


def uploaded_lines(server: ScriptedServer) -> list[dict[str, Any]]:
    """Every request line uploaded, whether or not a batch was made of it."""
    files = [f for f in server.batches.files.values() if f.purpose == "batch"]
    return [json.loads(text) for f in files for text in f.content.decode().splitlines()]


def row_of(line: dict[str, Any]) -> str:
    """The row id a batch line belongs to (its custom_id is ``<row id>.<request fingerprint>``)."""
    return str(line["custom_id"]).rpartition(".")[0]


def provider_state(journal: Path) -> dict[str, Any] | None:
    """The journal's provider state (out batches, intents), or ``None`` if not readable yet."""
    if not journal.exists():
        return None
    try:
        with sqlite3.connect(journal, timeout=5) as db:
            found = db.execute("SELECT value FROM batch WHERE key = 'provider_state'").fetchone()
    except sqlite3.OperationalError:
        return None
    return json.loads(found[0]) if found else {}


def wait_until(condition: Any, seconds: float = 60) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return False
