"""Shared by the Anthropic and Azure CLI tests: the shipped triage project with its agent on
another provider, the environment of a ``runner`` process pointed at a strict server, and
the bodies the server received checked against the provider's own request types."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from runner.model.anthropic_server import AnthropicServer
from tests.support.project import copy_shipped, runner_env

ANTHROPIC_KEY = "sk-ant-test-0123456789"
OPENAI_KEY = "sk-openai-canary-not-for-anthropic"
CLAUDE = "claude-haiku-4-5"
PRICE_IN, PRICE_OUT, PRICE_CACHE_READ, PRICE_CACHE_WRITE = 1.00, 5.00, 0.10, 1.25  # the shipped claude-haiku-4-5 price
TRIAGE = {"category": "bug", "urgency": "high", "summary": "It crashes."}
USAGE = {"prompt_tokens": 100, "completion_tokens": 20}
SCRIPT: dict[str, Any] = {"fallback": {"content": json.dumps(TRIAGE), "usage": USAGE}}
LIVE_COST = (100 * PRICE_IN + 20 * PRICE_OUT) / 1_000_000


def triage_agent(model: str) -> str:
    """The shipped triage agent with ``model`` as its ``model:`` block (YAML flow text)."""
    shipped = (Path(__file__).resolve().parents[2] / "agents.d" / "triage.yaml").read_text()
    line = next(line for line in shipped.splitlines() if line.startswith("model:"))
    return shipped.replace(line, f"model: {model}")


def claude_project(root: Path) -> Path:
    """The shipped project, its triage agent on Claude through the native API."""
    agent = triage_agent(f"{{id: {CLAUDE}, provider: anthropic, max_tokens: 200}}")
    return copy_shipped(root, files={"agents.d/triage.yaml": agent})


def anthropic_env(server: AnthropicServer, **extra: str) -> dict[str, str]:
    """A runner process's environment: Anthropic's endpoint and key, and an OpenAI key that must stay home."""
    return runner_env(None, extra={"ANTHROPIC_BASE_URL": server.base_url, "ANTHROPIC_API_KEY": ANTHROPIC_KEY,
                                   "OPENAI_API_KEY": OPENAI_KEY, **extra})  # fmt: skip


def runner(root: Path, env: dict[str, str], *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "runner", *args], cwd=root, env=env, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)  # fmt: skip


def tickets(root: Path, count: int) -> Path:
    rows = [{"id": f"t{i}", "subject": f"Ticket {i}", "body": f"It crashes {i}"} for i in range(1, count + 1)]
    path = root / "tickets.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def records(path: Path) -> dict[str, dict[str, Any]]:
    return {r["id"]: r for r in map(json.loads, path.read_text().splitlines())}


def checked_requests(server: AnthropicServer) -> list[dict[str, Any]]:
    """Every Messages body and Message Batches request the server received, each checked
    against the anthropic package's types; the batch requests as ``{custom_id, params}``."""
    from tests.support.anthropic_types import check_batch_request, check_messages_body

    found: list[dict[str, Any]] = []
    for recorded in server.requests:
        if recorded.path == "/v1/messages" and recorded.method == "POST":
            check_messages_body(recorded.body)
            found.append(recorded.body)
        elif recorded.path == "/v1/messages/batches" and recorded.method == "POST":
            for request in recorded.body["requests"]:
                check_batch_request(request)
                found.append(request)
    return found
