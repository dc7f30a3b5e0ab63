"""Build runner's wheel and install it where only the processes that ask for it see it: the
package as a deployer gets it, not the checkout (:mod:`tests.test_packaging`, the Airflow
deployment test)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


class WheelUnavailable(Exception):
    """The wheel could not be built here (no package index to fetch the build backend from)."""


def build_and_install(base: Path) -> tuple[Path, Path]:
    """``(wheel, target)``: the wheel built from a copy of the package, ``pyproject.toml`` and the
    README (no ``build/`` or ``*.egg-info`` of an earlier build can leak in), installed with
    ``pip install --no-deps --target`` (put ``target`` on ``PYTHONPATH``; dependencies come from
    the running interpreter's environment)."""
    source = base / "source"
    shutil.copytree(REPO / "runner", source / "runner", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    built = subprocess.run([*pip, "wheel", "--no-deps", "-w", str(base / "dist"), str(source)],
                           capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    if built.returncode != 0:
        if "Could not find a version" in built.stderr or "No matching distribution" in built.stderr:
            raise WheelUnavailable(built.stderr[-300:])
        raise AssertionError(f"pip wheel failed:\n{built.stdout}\n{built.stderr}")
    (wheel,) = (base / "dist").glob("runner-*.whl")
    target = base / "site"
    subprocess.run([*pip, "install", "--no-deps", "--target", str(target), str(wheel)], check=True, timeout=300)
    return wheel, target
