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


def copy_shipped(
    root: Path, parts: Iterable[str] = SHIPPED, files: Mapping[str, str] | None = None,
    copies: Mapping[str, str] | None = None,
) -> Path:
    """``root`` with the repository's ``parts`` (directories or files, relative to the checkout)
    copied to the same place, ``copies`` (checkout path -> project path) copied elsewhere, then
    ``files`` written over them; returns ``root``."""
    for source, target in [*((part, part) for part in parts), *(copies or {}).items()]:
        if (REPO / source).is_dir():
            shutil.copytree(REPO / source, root / target)
        else:
            (root / target).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(REPO / source, root / target)
    root.mkdir(parents=True, exist_ok=True)
    return write_project(root, files or {})


def copy_project(source: Path, root: Path, files: Mapping[str, str] | None = None) -> Path:
    """The test project ``source`` copied to ``root``, then ``files`` written over it; returns ``root``."""
    shutil.copytree(source, root)
    return write_project(root, files or {})


def runner_env(
    server: Any | None = None, *, key: str = MODEL_KEY, extra: Mapping[str, str] | None = None, drop: Iterable[str] = ()
) -> dict[str, str]:
    """The environment of a ``runner`` process: no ``OPENAI_*`` variable of the caller's (nor any
    starting with a prefix in ``drop``, e.g. ``OTEL_``), this checkout first on ``PYTHONPATH``,
    ``server``'s URL and ``key`` when given, then ``extra``."""
    prefixes = ("OPENAI", *drop)
    env = {k: v for k, v in os.environ.items() if not k.startswith(prefixes)}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    if server is not None:
        env.update(OPENAI_BASE_URL=server.base_url, OPENAI_API_KEY=key)
    env.update(extra or {})
    return env


def run_cli(
    root: Path, server: Any | None, *args: str, env: Mapping[str, str] | None = None, timeout: float = 300,
    key: str = MODEL_KEY, drop: Iterable[str] = (),
) -> subprocess.CompletedProcess[str]:
    """``python -m runner ARGS`` in ``root``, pointed at ``server`` (see :func:`runner_env`), stdin closed."""
    return subprocess.run(
        [sys.executable, "-m", "runner", *args], cwd=root, env=runner_env(server, key=key, extra=env, drop=drop),
        capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def tool_call(tool: str, /, **arguments: object) -> dict[str, object]:
    """A scripted reply that calls one tool."""
    return {"tool_calls": [{"name": tool, "arguments": arguments}]}
