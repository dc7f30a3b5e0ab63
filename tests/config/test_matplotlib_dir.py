"""matplotlib's font cache for a user whose home cannot hold it (a service account)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from runner.config.matplotlib_dir import MPL_ENV, keep_matplotlib_cache


def _unmakeable(tmp_path: Path) -> str:
    """A home nobody can create, root included: below a regular file."""
    (tmp_path / "a-file").write_text("")
    return str(tmp_path / "a-file" / "home")


@pytest.fixture
def homeless(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A user whose home cannot be made (``useradd --system`` gives a home that does not exist); a state directory."""
    monkeypatch.setenv("HOME", _unmakeable(tmp_path))
    for name in (MPL_ENV, "XDG_CONFIG_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    state = tmp_path / "state"
    monkeypatch.setenv("RUNNER_STATE_DIR", str(state))
    return state


def test_a_user_without_a_writable_home_keeps_the_cache_in_the_state_dir(homeless: Path) -> None:
    target = keep_matplotlib_cache()
    assert target == homeless / "user-cache" / "matplotlib" and target.is_dir()
    assert os.environ[MPL_ENV] == str(target)
    assert keep_matplotlib_cache() is None, "set once: a second call changes nothing"


def test_without_a_home_matplotlib_builds_its_font_cache_once_in_the_state_dir(homeless: Path) -> None:
    """The real matplotlib in fresh processes, as two tasks of a worker without a home."""
    if importlib.util.find_spec("matplotlib") is None:  # not importorskip: importing it here would set $MPLCONFIGDIR
        pytest.skip("matplotlib is not installed")
    probe = (
        "from runner.config.matplotlib_dir import keep_matplotlib_cache as k; k();"
        "import matplotlib, matplotlib.font_manager, os; print(os.environ.get('MPLCONFIGDIR')); print(matplotlib.get_cachedir())"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    runs = [subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
            for _ in range(2)]  # fmt: skip
    expected = str(homeless / "user-cache" / "matplotlib")
    assert [r.stdout.split() for r in runs] == [[expected, expected]] * 2, [r.stderr[-2000:] for r in runs]
    assert list(Path(expected).glob("fontlist-*.json")), "the font cache is kept for the next process"
    assert "temporary cache directory" not in runs[1].stderr


def test_a_set_mplconfigdir_or_a_writable_home_is_left_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", _unmakeable(tmp_path))
    monkeypatch.setenv(MPL_ENV, str(tmp_path / "mine"))
    assert keep_matplotlib_cache() is None and os.environ[MPL_ENV] == str(tmp_path / "mine")
    monkeypatch.delenv(MPL_ENV)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))  # does not exist yet, but can be made
    assert keep_matplotlib_cache() is None and MPL_ENV not in os.environ
    assert (tmp_path / "config" / "matplotlib").is_dir(), "made, as matplotlib would make it"


def test_without_a_home_or_a_state_dir_matplotlib_keeps_its_own_fallback(homeless: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RUNNER_STATE_DIR")
    assert keep_matplotlib_cache() is None and MPL_ENV not in os.environ
