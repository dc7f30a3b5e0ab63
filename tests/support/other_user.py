"""Processes started as another (non-root) user from a test running as root, with the
interpreter reachable: shared by the Airflow deployment tests and the store tests.

Root starts ``bwrap`` (it mounts), which starts ``setpriv`` (drops to the user, no
supplementary groups). CI's Python and venv may live where that user cannot reach them
(under ``/root``, mode 0700): inside the process's mount namespace each such directory is
covered by an empty tmpfs through which only the paths needed (the venv, the interpreter's
prefix, the checkout, a test's directory) are bound again. Nothing outside the namespace
changes: the test (root) reads what the user's processes wrote.
"""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class WorkerUser:
    """A non-root account a test's processes run as."""

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


def system_user(name: str) -> WorkerUser | None:
    """The account ``name`` (e.g. ``nobody``), or ``None`` when it does not exist or this
    process is not root (only root can switch users)."""
    if os.geteuid() != 0:
        return None
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        return None
    return WorkerUser(name, entry.pw_uid, entry.pw_gid, entry.pw_dir)


def can_start_as(user: WorkerUser | None) -> bool:
    """Whether :func:`as_user` works here: root, ``bwrap`` able to mount, and ``setpriv``."""
    if user is None or not (shutil.which("bwrap") and shutil.which("setpriv")):
        return False
    probe = as_user(user, ["true"])
    return subprocess.run(probe, capture_output=True, check=False, timeout=60).returncode == 0


def as_user(user: WorkerUser, argv: Sequence[str], *, read_only: Sequence[Path] = (), writable: Sequence[Path] = ()) -> list[str]:
    """``argv`` run as ``user`` with the interpreter, ``read_only`` and ``writable`` reachable
    (the rest of the file system as it is, with the user's own permissions)."""
    reach = exposing_mounts([*interpreter_paths(), *read_only], list(writable))
    return ["bwrap", "--dev-bind", "/", "/", *reach, *user.drop(), *argv]


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
