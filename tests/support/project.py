"""Runner projects for tests, and ``runner`` run as a real process against them.

One place for what the suites used to write each in their own way:

* :func:`write_project` - files from text (``{"agents.d/a.yaml": "..."}``) under a root;
* :func:`copy_shipped` - the repository's own ``agents.d``/``tasks.d`` (and any other part, such
  as ``examples/data``), with files of the test's own added or replaced;
* :func:`copy_project` - a test project directory (``tests/runs/project``) copied whole;
* :func:`sandbox_project` - a project under ``/tmp`` whose tools run in the real sandbox;
* :func:`judged_price` - agents whose answers a reviewer on another model judges, and a task;
* :func:`runner_env` / :func:`run_cli` - the environment and the CLI process: this checkout
  first on ``PYTHONPATH`` (so a worktree tests itself, not the editable install), no OpenAI
  variable of the caller's, pointed at a loopback :class:`~runner.model.server.ScriptedServer`.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
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
    shutil.copytree(source, root, ignore=shutil.ignore_patterns(".runner", "reports"))  # never a source tree's run state
    return write_project(root, files or {})


@contextlib.contextmanager
def sandbox_project(name: str, files: Mapping[str, str]) -> Iterator[Path]:
    """A project of ``files`` under ``/tmp`` (``runner-NAME-...``), removed afterwards: the
    sandbox user must reach its workspaces, and it cannot enter pytest's ``tmp_path``."""
    root = Path(tempfile.mkdtemp(prefix=f"runner-{name}-", dir="/tmp"))
    root.chmod(0o755)
    try:
        yield write_project(root, files)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def judged_price(
    criteria: Sequence[str], *, writer_model: str = "{id: gpt-4o-mini}", inputs: Mapping[str, str] | None = None,
    goal: str = "How much does the Team plan cost?",
) -> str:
    """``agents.d`` text: the agent ``writer`` (``writer_model``) whose answers ``reviewer`` (on
    gpt-4o, "a strict reviewer of support answers") judges against ``criteria``, with one repair;
    the task ``price`` (``inputs``: name -> YAML spec) asking it ``goal``, capped at $1."""
    lines = [f"  {name}: {spec}\n" for name, spec in (inputs or {}).items()]
    declared = "inputs:\n" + "".join(lines) if lines else ""
    return f"""\
apiVersion: runner/v1
kind: Agent
name: writer
model: {writer_model}
system_prompt: You write product answers.
checks:
  judge: {{agent: reviewer, criteria: {json.dumps(list(criteria))}}}
  max_repairs: 1
---
apiVersion: runner/v1
kind: Agent
name: reviewer
model: {{id: gpt-4o, max_tokens: 100}}
system_prompt: You are a strict reviewer of support answers.
---
apiVersion: runner/v1
kind: Task
name: price
{declared}agent: writer
goal: {goal}
caps: {{max_cost_usd: 1.0}}
"""


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
