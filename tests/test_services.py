"""A missing service skips a test on a developer's machine and fails it under CI (``$CI`` set)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CASES = '''
import pytest
from tests.support.services import import_or_missing, missing, requires

@requires(False, "no such browser")
def test_marked():
    pass

def test_called():
    missing("no such cluster")

def test_imported():
    import_or_missing("no_such_module_for_runner_tests", "not installed")
'''
CONFTEST = """from tests.support.services import MARKER, check_marked

def pytest_configure(config):
    config.addinivalue_line("markers", MARKER)

def pytest_runtest_setup(item):
    check_marked(item)
"""


def outcomes(tmp_path: Path, ci: str | None) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_cases.py").write_text(CASES)
    (tmp_path / "conftest.py").write_text(CONFTEST)
    env = {k: v for k, v in os.environ.items() if k != "CI"} | {"PYTHONPATH": str(REPO)} | ({"CI": ci} if ci is not None else {})
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rfs", str(tmp_path)], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL, check=False)  # fmt: skip
    return done


@pytest.mark.parametrize("ci", [None, "", "false", "0"])
def test_without_ci_a_missing_service_skips_with_the_reason(tmp_path: Path, ci: str | None) -> None:
    done = outcomes(tmp_path, ci)
    out = done.stdout
    assert done.returncode == 0 and "3 skipped" in out and "no such browser" in out and "no such cluster" in out and "not installed" in out


@pytest.mark.parametrize("ci", ["true", "1"])
def test_under_ci_a_missing_service_fails(tmp_path: Path, ci: str) -> None:
    done = outcomes(tmp_path, ci)
    out = done.stdout  # the marked test fails in its setup (an error), the other two in their call
    assert done.returncode == 1 and "2 failed, 1 error" in out and "skipped" not in out
    assert "CI installs every service" in out and all(why in out for why in ("no such browser", "no such cluster", "not installed"))
