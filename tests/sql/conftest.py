"""A project copy with the sales data, the CLI as a process, and sales databases to read."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from runner.model.server import ScriptedServer

REPO = Path(__file__).resolve().parents[2]
CANARY = "sk-canary-sql-0123456789"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """The repository's agents, tasks and sample data, in a directory of its own."""
    root = tmp_path / "project"
    for part in ("agents.d", "tasks.d", "examples/data"):
        shutil.copytree(REPO / part, root / part)
    return root


def run_cli(root: Path, server: ScriptedServer | None, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m runner ARGS`` in ``root``, talking to ``server``."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI", "SALES_DB", "RUNNER_TEST"))}
    environ["PYTHONPATH"] = str(REPO) + os.pathsep + environ.get("PYTHONPATH", "")
    if server is not None:
        environ.update(OPENAI_BASE_URL=server.base_url, OPENAI_API_KEY=CANARY)
    environ.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "runner", *args], cwd=root, env=environ, capture_output=True, text=True, timeout=300,
        stdin=subprocess.DEVNULL,
    )


def seed(url: str, *extra: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run scripts/seed_sales_db.py against ``url``."""
    environ = {**os.environ, "SEED_URL": url, **(env or {})}
    return subprocess.run(
        [sys.executable, str(REPO / "scripts" / "seed_sales_db.py"), "--url-env", "SEED_URL", *extra],
        env=environ, capture_output=True, text=True, timeout=300, check=True,
    )


@pytest.fixture
def sales_sqlite(project: Path) -> Path:
    """``data/sales.sqlite`` in the project, seeded by the script."""
    path = project / "data" / "sales.sqlite"
    path.parent.mkdir()
    seed(f"sqlite:///{path}")
    return path


def report_json(project: Path, task: str) -> dict[str, Any]:
    (report_dir,) = (project / "reports" / task).iterdir()
    loaded: dict[str, Any] = json.loads((report_dir / "report.json").read_text())
    return loaded


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path
