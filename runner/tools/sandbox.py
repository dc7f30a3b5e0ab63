"""Run model-written code and commands under an OS sandbox (bubblewrap + prlimit).

The recipe is the one measured in ``SECURITY.md``: every namespace unshared, only ``/usr``
(with the ``/lib``, ``/lib64``, ``/bin`` symlinks of a merged-/usr Debian) bound
read-only, fresh ``/proc``, ``/dev`` and ``/tmp``, one writable bind of the workspace at
``/workspace``, resource limits through ``prlimit``, and bwrap itself started with an
empty environment as uid/gid 65534 when the runner is root (``RLIMIT_NPROC`` does
nothing for uid 0). Nothing of the host's ``/etc`` or home is visible inside.

``prlimit`` limits are per process; each call also has totals (see ``call_limits``): one
control group bounds the memory and the number of processes of the whole call and kills
them all at its end, ``/tmp`` and ``/dev/shm`` are tmpfs mounts of ``tmp_mb`` each (the
rest of ``/dev`` is read-only), the workspace has a disk quota (``disk_mb``), and a
seccomp filter denies ptrace, mounts, namespaces, bpf, io_uring, the key ring and
non-Unix sockets. What the host cannot enforce is said loudly, never silently skipped.

Commands run with the host's Debian system Python (``/usr/bin/python3``), not the
runner's virtualenv: packages such as pandas are only available inside the sandbox if
they are installed system-wide under ``/usr``.

Fail closed: with ``mode: bwrap`` and no working bubblewrap, :class:`SandboxUnavailable`
is raised. ``mode: none`` (explicit in the agent YAML only) runs without isolation but
still with an empty environment, the limits, the totals and the timeout.
"""

from __future__ import annotations

import functools
import os
import shutil
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from runner.errors import SandboxUnavailable
from runner.tools.bwrap import NOBODY, SANDBOX_PATH, bwrap_argv, limit_flags, sandbox_user
from runner.tools.call_limits import CallLimits, unenforced_here, warn_once
from runner.tools.capture import ProcessOutcome, run_bounded
from runner.tools.command_result import CommandResult, Exceeded
from runner.tools.sandbox_policy import SandboxPolicy

SYSTEM_PYTHON = "/usr/bin/python3"
_INSTALL_HINT = (
    "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; it needs unprivileged "
    "user namespaces), or set `sandbox: {mode: none}` explicitly in the agent YAML to run "
    "code and shell tools without isolation"
)

__all__ = ["CommandResult", "SandboxPolicy", "ensure_sandbox", "probe_sandbox", "run_command"]


@dataclass(frozen=True)
class SandboxProbe:
    """Whether bubblewrap works on this host, and why not."""

    ok: bool
    reason: str = ""


def run_command(
    command: Sequence[str], workspace: Path, policy: SandboxPolicy, *, stdin: bytes | None = None
) -> CommandResult:
    """Run ``command`` confined to ``workspace`` under ``policy``.

    Inside bubblewrap the workspace is ``/workspace`` (also the working directory); with
    ``mode: none`` the command runs in the workspace's real path.
    """
    prlimit = _require("prlimit")
    limits = [prlimit, *limit_flags(policy), "--"]
    if policy.mode not in ("bwrap", "none"):
        raise SandboxUnavailable(f"unknown sandbox mode {policy.mode!r}: use 'bwrap' or 'none'")
    bwrap = ensure_sandbox() if policy.mode == "bwrap" else None
    prepare_workspace(workspace)
    with CallLimits(policy, workspace, bwrap) as call:
        if bwrap is not None:
            argv = [*bwrap_argv(bwrap, policy, workspace, seccomp_fd=call.seccomp_fd), *limits, *command]
            env: dict[str, str] = {}
            cwd = None
        else:
            argv = [*limits, *command]
            env = {"PATH": SANDBOX_PATH, "HOME": str(workspace), "LANG": "C.UTF-8"}
            cwd = workspace
        outcome = run_bounded(
            argv,
            env=env,
            cwd=cwd,
            wall_seconds=policy.wall_seconds,
            max_output_bytes=policy.max_output_bytes,
            stdin_data=stdin,
            run_as=sandbox_user(),
            pass_fds=call.pass_fds,
            before_start=call.before_start,
            watch=call.watch,
        )
    return _result(outcome, policy, call)


def ensure_sandbox() -> str:
    """Return the bwrap path if the sandbox works here; raise SandboxUnavailable if not."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise SandboxUnavailable(f"bubblewrap (bwrap) is not installed: {_INSTALL_HINT}")
    probe = probe_sandbox(bwrap)
    if not probe.ok:
        raise SandboxUnavailable(f"bubblewrap does not work on this host ({probe.reason}): {_INSTALL_HINT}")
    warn_once(unenforced_here(False, bwrap))  # at the start of a run, before any model call is paid for
    return bwrap


@functools.cache
def probe_sandbox(bwrap: str) -> SandboxProbe:
    """Run ``bwrap … true`` once with the full recipe and report whether it worked."""
    prlimit = shutil.which("prlimit")
    if prlimit is None:
        return SandboxProbe(False, "util-linux prlimit is not installed")
    policy = SandboxPolicy(wall_seconds=20.0, max_output_bytes=4096)
    argv = [*bwrap_argv(bwrap, policy, None), prlimit, *limit_flags(policy), "--", "true"]
    try:
        outcome = run_bounded(
            argv,
            env={},
            cwd=None,
            wall_seconds=policy.wall_seconds,
            max_output_bytes=policy.max_output_bytes,
            run_as=NOBODY if os.geteuid() == 0 else None,
        )
    except OSError as error:
        return SandboxProbe(False, f"cannot start bwrap: {error}")
    if outcome.returncode != 0:
        detail = outcome.stderr.decode("utf-8", "replace").strip() or "no error output"
        status = "timed out" if outcome.timed_out else f"exit code {outcome.returncode}"
        return SandboxProbe(False, f"{status}: {detail[:300]}")
    return SandboxProbe(True)


def prepare_workspace(workspace: Path) -> None:
    """Make ``workspace`` usable by the sandbox user (uid 65534) when the runner is root.

    Owns the workspace directory to uid/gid 65534 and checks that every ancestor is
    searchable by others, which bubblewrap needs to bind it.
    """
    if os.geteuid() != 0:
        return
    info = workspace.stat()
    if (info.st_uid, info.st_gid) != (NOBODY, NOBODY):
        os.chown(workspace, NOBODY, NOBODY)
    for ancestor in workspace.parents:
        mode = ancestor.stat().st_mode
        if not mode & stat.S_IXOTH:
            raise SandboxUnavailable(
                f"the sandbox user (uid {NOBODY}) cannot reach the workspace {workspace}: "
                f"{ancestor} has mode {stat.filemode(mode)}; run `chmod o+x {ancestor}` or "
                "keep workspaces under a directory others can traverse"
            )


def _require(program: str) -> str:
    path = shutil.which(program)
    if path is None:
        raise SandboxUnavailable(f"{program} is not installed (Debian: util-linux): {_INSTALL_HINT}")
    return path


def _result(outcome: ProcessOutcome, policy: SandboxPolicy, call: CallLimits) -> CommandResult:
    disk = call.disk
    exceeded: Exceeded | None = None
    if disk is not None and disk.exceeded:
        exceeded = "disk"
    elif call.events.oom_kills:
        exceeded = "memory"
    return CommandResult(
        exit_code=outcome.returncode,
        stdout=outcome.stdout.decode("utf-8", "replace"),
        stderr=outcome.stderr.decode("utf-8", "replace"),
        timed_out=outcome.timed_out,
        truncated=outcome.truncated,
        policy=policy,
        exceeded=exceeded,
        disk=disk,
        unenforced=call.unenforced,
    )
