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
namespace changes: the test (root) reads what the user's processes wrote. The shared part
(the account, the mounts) is :mod:`tests.support.other_user`.
"""

from __future__ import annotations

import os
import pwd
from pathlib import Path

from tests.support.other_user import WorkerUser, exposing_mounts, interpreter_paths

__all__ = ["WorkerUser", "exposing_mounts", "hand_over", "interpreter_paths", "worker_user"]

USER_ENV = "RUNNER_AIRFLOW_DEPLOY_USER"


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


def hand_over(user: WorkerUser, base: Path, owned: list[Path]) -> None:
    """Open ``base`` (a test's private directory) to others and give ``owned`` (the
    directories the deployment writes: AIRFLOW_HOME, the state dir, the shared location) to
    the user, as a deployer provisions them."""
    base.chmod(0o755)
    for directory in owned:
        directory.mkdir(parents=True, exist_ok=True)
        for path in [directory, *directory.rglob("*")]:
            os.chown(path, user.uid, user.gid, follow_symlinks=False)
