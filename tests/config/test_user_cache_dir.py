"""Where the per-user cache (the key that signs the compiled project cache) goes for a service account:
an Airflow worker's system user often has no home directory it can write."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from runner.config import compiled
from runner.config.project import _read_files, config_files, load_project

AGENT = """\
apiVersion: runner/v1
kind: Agent
name: helper
model: {id: gpt-4o-mini}
system_prompt: You help.
"""


@pytest.fixture
def no_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A HOME this user cannot make ``.cache`` under (a file stands where the directory would)."""
    home = tmp_path / "home-is-a-file"
    home.write_text("")
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(home))
    return home


def test_a_writable_home_keeps_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("RUNNER_STATE_DIR", str(tmp_path / "state"))
    assert compiled.user_cache_dir() == tmp_path / "home/.cache/runner"


def test_without_a_writable_home_the_cache_goes_to_the_state_dir(
    no_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = tmp_path / "state"
    monkeypatch.setenv("RUNNER_STATE_DIR", str(state))
    assert compiled.user_cache_dir() == state / "user-cache"
    assert compiled.user_key(create=True) is not None
    key = state / "user-cache/project-cache.key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600 and stat.S_IMODE(key.parent.stat().st_mode) == 0o700


def test_the_project_cache_works_for_a_user_without_a_home(
    no_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "state").mkdir()  # provisioned for the worker (a run makes it otherwise)
    monkeypatch.setenv("RUNNER_STATE_DIR", str(tmp_path / "state"))
    root = tmp_path / "project"
    (root / "agents.d").mkdir(parents=True)
    (root / "agents.d/helper.yaml").write_text(AGENT)
    _, problems = load_project(root)
    assert problems == [] and compiled.cache_file(root).is_file()
    files, _ = _read_files(config_files(root.resolve()), root.resolve())
    assert compiled.read_cache(root.resolve(), compiled.cache_key(root.resolve(), files)) is not None


def test_a_relative_state_dir_is_no_place_for_the_key(no_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RUNNER_STATE_DIR", "state")  # relative to a project: not a per-user place
    assert compiled.user_key(create=True) is None


def test_no_home_and_no_state_dir_means_no_cache_never_an_error(no_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RUNNER_STATE_DIR", raising=False)
    assert compiled.user_key(create=True) is None


def test_a_uid_without_a_passwd_entry_or_home_uses_the_state_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A container's arbitrary uid: no $HOME and no passwd entry, so ``Path.home()`` raises."""

    def no_home_at_all() -> Path:
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setattr(Path, "home", staticmethod(no_home_at_all))
    monkeypatch.delenv("RUNNER_STATE_DIR", raising=False)
    assert compiled.user_key(create=True) is None
    monkeypatch.setenv("RUNNER_STATE_DIR", str(tmp_path / "state"))
    assert compiled.user_cache_dir() == tmp_path / "state/user-cache"
    assert compiled.user_key(create=True) is not None
