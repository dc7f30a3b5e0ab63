"""A project copy with the sales data, the CLI as a process, and sales databases to read."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from runner.model.server import ScriptedServer
from tests.support.project import copy_shipped
from tests.support.project import run_cli as support_cli

REPO = Path(__file__).resolve().parents[2]
CANARY = "sk-canary-sql-0123456789"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """The repository's agents, tasks and sample data, in a directory of its own."""
    return copy_shipped(tmp_path / "project", ("agents.d", "tasks.d", "examples/data"))


def run_cli(root: Path, server: ScriptedServer | None, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m runner ARGS`` in ``root``, talking to ``server``."""
    return support_cli(root, server, *args, env=env, key=CANARY, drop=("SALES_DB", "RUNNER_TEST"))


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
