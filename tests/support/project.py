"""Runner projects for tests, and ``runner`` run as a real process against them.

One place for what the suites used to write each in their own way:

* :func:`write_project` - files from text (``{"agents.d/a.yaml": "..."}``) under a root;
* :func:`copy_shipped` - the repository's own ``agents.d``/``tasks.d`` (and any other part, such
  as ``examples/data``), with files of the test's own added or replaced;
* :func:`copy_project` - a test project directory (``tests/runs/project``) copied whole;
* :func:`runner_env` / :func:`run_cli` - the environment and the CLI process: this checkout
  first on ``PYTHONPATH`` (so a worktree tests itself, not the editable install), no OpenAI
  variable of the caller's, pointed at a loopback :class:`~runner.model.server.ScriptedServer`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
MODEL_KEY = "sk-model-key-web-0123456789"
"""The API key the CLI processes send to the loopback server (tests look for it in logs and reports)."""
SHIPPED = ("agents.d", "tasks.d")


def write_project(root: Path, files: Mapping[str, str]) -> Path:
    """Write ``files`` (relative path -> text) under ``root``; return ``root``."""
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def copy_shipped(root: Path, parts: Iterable[str] = SHIPPED, files: Mapping[str, str] | None = None) -> Path:
    """``root`` with the repository's ``parts`` (directories or files, relative to the checkout)
    copied in, then ``files`` written over them; returns ``root``."""
    for part in parts:
        source, target = REPO / part, root / part
        if source.is_dir():
            shutil.copytree(source, target)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(source, target)
    return write_project(root, files or {})


def copy_project(source: Path, root: Path, files: Mapping[str, str] | None = None) -> Path:
    """The test project ``source`` copied to ``root``, then ``files`` written over it; returns ``root``."""
    shutil.copytree(source, root)
    return write_project(root, files or {})


def runner_env(
    server: Any | None = None, *, key: str = MODEL_KEY, extra: Mapping[str, str] | None = None, keep_runner: bool = True
) -> dict[str, str]:
    """The environment of a ``runner`` process: no ``OPENAI_*`` variable of the caller's (and, without
    ``keep_runner``, no ``RUNNER_*`` one), this checkout first on ``PYTHONPATH``, ``server``'s URL
    and ``key`` when given, then ``extra``."""
    drop = ("OPENAI",) if keep_runner else ("OPENAI", "RUNNER_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    if server is not None:
        env.update(OPENAI_BASE_URL=server.base_url, OPENAI_API_KEY=key)
    env.update(extra or {})
    return env


def run_cli(
    root: Path, server: Any | None, *args: str, env: Mapping[str, str] | None = None, timeout: float = 300,
    key: str = MODEL_KEY,
) -> subprocess.CompletedProcess[str]:
    """``python -m runner ARGS`` in ``root``, pointed at ``server``, stdin closed."""
    return subprocess.run(
        [sys.executable, "-m", "runner", *args], cwd=root, env=runner_env(server, key=key, extra=env), capture_output=True,
        text=True, timeout=timeout, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def tool_call(tool: str, /, **arguments: object) -> dict[str, object]:
    """A scripted reply that calls one tool."""
    return {"tool_calls": [{"name": tool, "arguments": arguments}]}
