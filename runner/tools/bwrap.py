"""The confinement itself: the bubblewrap command line, the ``prlimit`` flags and the user a
sandboxed command runs as. Shared by :mod:`runner.tools.sandbox` (which runs commands under
it) and :mod:`runner.tools.call_limits` (which probes once what this host's bubblewrap
accepts), so neither imports the other.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
from pathlib import Path

from runner.tools.disk_quota import MIB
from runner.tools.sandbox_policy import SandboxPolicy

NOBODY = 65534
SANDBOX_WORKSPACE = "/workspace"
SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"


def sandbox_user() -> int | None:
    """The uid/gid sandboxed commands run as: 65534 when the runner is root, else the runner's own."""
    return NOBODY if os.geteuid() == 0 else None


def limit_flags(policy: SandboxPolicy) -> list[str]:
    """``prlimit`` options for ``policy`` (soft = hard)."""
    return [
        f"--as={policy.memory_mb * MIB}",
        f"--cpu={policy.cpu_seconds}",
        f"--nofile={policy.max_open_files}",
        f"--fsize={policy.max_file_mb * MIB}",
        f"--nproc={policy.max_processes}",
        "--core=0",
    ]


def bwrap_argv(
    bwrap: str, policy: SandboxPolicy, workspace: Path | None, *, seccomp_fd: int | None = None
) -> list[str]:
    """The bubblewrap command line up to (not including) the confined command."""
    argv = [bwrap, "--unshare-all"]
    if policy.network:
        argv.append("--share-net")
    argv += ["--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    argv += ["--ro-bind", "/usr", "/usr"]
    for name in ("bin", "lib", "lib64", "sbin"):
        target = Path("/", name)
        if target.is_symlink():
            argv += ["--symlink", os.readlink(target), f"/{name}"]
    size = ["--size", str(policy.tmp_mb * MIB)] if "--size" in bwrap_options(bwrap) else []
    # /dev is a tmpfs bwrap fills with device nodes: only its /dev/shm stays writable, sized
    argv += ["--proc", "/proc", "--dev", "/dev", *size, "--tmpfs", "/dev/shm", "--remount-ro", "/dev"]
    argv += [*size, "--tmpfs", "/tmp"]
    if workspace is not None:
        argv += ["--bind", str(workspace), SANDBOX_WORKSPACE, "--chdir", SANDBOX_WORKSPACE]
    argv += ["--remount-ro", "/"]
    if seccomp_fd is not None:
        argv += ["--seccomp", str(seccomp_fd)]
    argv += ["--setenv", "PATH", SANDBOX_PATH, "--setenv", "HOME", "/tmp"]
    argv += ["--setenv", "LANG", "C.UTF-8", "--"]
    return argv


@functools.cache
def bwrap_options(bwrap: str) -> frozenset[str]:
    """The options this bubblewrap accepts, read from its ``--help`` (``--size`` needs 0.5 or later)."""
    try:
        shown = subprocess.run([bwrap, "--help"], capture_output=True, text=True, timeout=20, env={}, check=False)
    except (OSError, subprocess.SubprocessError):
        return frozenset()
    return frozenset(re.findall(r"^\s+(--[a-z][a-z-]*)", shown.stdout + shown.stderr, re.MULTILINE))
