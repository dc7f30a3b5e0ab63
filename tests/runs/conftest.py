from __future__ import annotations

import shutil
from pathlib import Path

import pytest

FIXTURE = Path(__file__).parent / "project"


@pytest.fixture
def project_dir(tmp_path: Path) -> Path:
    """A fresh copy of the test project (agents, tasks, data) per test."""
    target = tmp_path / "project"
    shutil.copytree(FIXTURE, target)
    return target
