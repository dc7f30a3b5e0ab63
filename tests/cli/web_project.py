"""Helpers for the CLI tests of the web, knowledge and check features: a project written from
YAML text, and `runner` run as a real process against the loopback model server."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from runner.model.server import ScriptedServer

REPO = Path(__file__).resolve().parents[2]
MODEL_KEY = "sk-model-key-web-0123456789"


def write_project(root: Path, files: dict[str, str]) -> Path:
    """Write ``files`` (relative path -> text) under ``root``; return ``root``."""
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def runner(
    root: Path, server: ScriptedServer | None, *args: str, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """``python -m runner ARGS`` in ``root``, pointed at ``server`` (no other OpenAI variables)."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI")}
    environment["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), environment.get("PYTHONPATH")]))
    if server is not None:
        environment.update(OPENAI_BASE_URL=server.base_url, OPENAI_API_KEY=MODEL_KEY)
    environment.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "runner", *args], cwd=root, env=environment, capture_output=True, text=True,
        timeout=timeout, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def tool_call(tool: str, /, **arguments: object) -> dict[str, object]:
    """A scripted reply that calls one tool."""
    return {"tool_calls": [{"name": tool, "arguments": arguments}]}
