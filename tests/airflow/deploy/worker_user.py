"""The deployment's Airflow processes as a non-root user, as a real deployment runs them.

``.ci/airflow_e2e.sh`` creates a system user (``useradd --system``: no home directory, as
a packaged ``airflow`` user often has none) and names it in ``RUNNER_AIRFLOW_DEPLOY_USER``.
When this process is root and bubblewrap works, every Airflow process (and so every task)
starts through ``bwrap`` (as root: it mounts) and then ``setpriv`` (drops to the user,
no supplementary groups), with ``HOME``/``USER``/``LOGNAME`` the user's, as a service
manager's ``User=`` gives them.

The interpreter may live where that user cannot reach it (CI's Python and venv are under
``/root``, mode 0700): inside the processes' mount namespace each such directory is covered
by an empty tmpfs through which only the paths the deployment needs (the venv, the
interpreter's prefix, the test's base directory) are bound again. Nothing outside the
namespace changes: the test (root) reads what the user's processes wrote.
"""

from __future__ import annotations

import os
import pwd
import stat
import sys
from dataclasses import dataclass
from pathlib import Path

USER_ENV = "RUNNER_AIRFLOW_DEPLOY_USER"


@dataclass(frozen=True)
class WorkerUser:
    """The non-root account the deployment's processes run as."""

    name: str
    uid: int
    gid: int
    home: str

    def env(self) -> dict[str, str]:
        """What a service manager sets for the account (the home may not exist)."""
        return {"HOME": self.home, "USER": self.name, "LOGNAME": self.name}

    def drop(self) -> list[str]:
        """The argv prefix that runs the rest as this user (as root: no groups of root's kept)."""
        return ["setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", "--clear-groups", "--"]


def worker_user() -> WorkerUser | None:
    """The account named by ``$RUNNER_AIRFLOW_DEPLOY_USER``, or ``None`` (unset, or not root:
    only root can switch users)."""
    name = os.environ.get(USER_ENV, "").strip()
    if not name or os.geteuid() != 0:
        return None
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        raise AssertionError(
            f"${USER_ENV} names {name!r}, which is not a user here (useradd --system {name})"
        ) from None
    return WorkerUser(name, entry.pw_uid, entry.pw_gid, entry.pw_dir)


def interpreter_paths() -> list[Path]:
    """The directories the deployment's interpreter needs: the venv and the base installation."""
    found: list[Path] = []
    for prefix in (sys.prefix, sys.base_prefix):
        for path in (Path(prefix), Path(os.path.realpath(prefix))):
            if path not in found:
                found.append(path)
    return found


def exposing_mounts(read_only: list[Path], writable: list[Path]) -> list[str]:
    """bwrap arguments that let another user reach these paths: every ancestor others cannot
    traverse is covered by a tmpfs (mode 0755), and the paths are bound again beneath it."""
    covers: list[Path] = []
    binds: list[str] = []
    for path, option in [*((p, "--ro-bind") for p in read_only), *((p, "--bind") for p in writable)]:
        hidden = _closed_ancestor(path)
        if hidden is None:
            continue
        if hidden not in covers:
            covers.append(hidden)
        between = [a for a in reversed(path.parents) if a.is_relative_to(hidden) and a != hidden]
        binds += [arg for a in between for arg in ("--dir", str(a))]  # 0755: bwrap would copy a parent's 0700
        binds += [option, str(path), str(path)]
    return [*(arg for cover in covers for arg in ("--tmpfs", str(cover))), *binds]


def _closed_ancestor(path: Path) -> Path | None:
    """The outermost ancestor of ``path`` that others cannot traverse (``path`` itself must be open)."""
    for ancestor in reversed(path.parents):
        if not ancestor.stat().st_mode & stat.S_IXOTH:
            return ancestor
    if not path.stat().st_mode & stat.S_IXOTH:
        raise AssertionError(f"{path} has mode {stat.filemode(path.stat().st_mode)}: the worker user cannot enter it")
    return None


def hand_over(user: WorkerUser, base: Path, owned: list[Path]) -> None:
    """Open ``base`` (a test's private directory) to others and give ``owned`` (the
    directories the deployment writes: AIRFLOW_HOME, the state dir, the shared location) to
    the user, as a deployer provisions them."""
    base.chmod(0o755)
    for directory in owned:
        directory.mkdir(parents=True, exist_ok=True)
        for path in [directory, *directory.rglob("*")]:
            os.chown(path, user.uid, user.gid, follow_symlinks=False)
