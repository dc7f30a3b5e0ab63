"""The totals of one sandboxed call, set up around it and enforced while it runs.

- a control group (:mod:`runner.tools.cgroups`): memory and process count over the whole
  call, everything killed when it ends;
- a seccomp filter (:mod:`runner.tools.seccomp`), handed to bubblewrap as a file descriptor;
- the workspace's disk quota (:mod:`runner.tools.disk_quota`): measured before, watched
  during, settled after the call;
- a watch, checked a few times a second, that stops the call at its first out-of-memory
  kill (cgroup v1 has no ``memory.oom.group``) or once the workspace passes its quota.

What this host cannot enforce is listed in :attr:`CallLimits.unenforced`, shown to the
model with the call's result, and logged once per process as a warning.
"""

from __future__ import annotations

import functools
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

from runner.errors import ToolFailure
from runner.tools.bwrap import bwrap_argv, bwrap_options, sandbox_user
from runner.tools.capture import Watch, run_bounded
from runner.tools.cgroups import CallCgroup, CgroupError, CgroupEvents, CgroupLimits, probe_cgroups
from runner.tools.disk_quota import MAX_DEPTH, MIB, DiskQuota, DiskReport
from runner.tools.sandbox_policy import SandboxPolicy
from runner.tools.seccomp import SeccompFilter, open_program, seccomp_filter

BWRAP_TASKS = 2
"""bubblewrap's own processes in a call's group: the outer one and the PID namespace's init."""
WATCH_SECONDS = 0.1
DISK_CHECK_SECONDS = 0.1
_log = logging.getLogger("runner.sandbox")


class CallLimits:
    """Context manager around one call; after it exits, ``events`` and ``disk`` tell what happened."""

    def __init__(self, policy: SandboxPolicy, workspace: Path, bwrap: str | None):
        self.policy, self.workspace, self.bwrap = policy, workspace, bwrap
        self.events = CgroupEvents()
        self.disk: DiskReport | None = None
        self.unenforced: tuple[str, ...] = ()
        self.seccomp_fd: int | None = None
        self._group: CallCgroup | None = None
        self._next_disk_check = 0.0

    def __enter__(self) -> CallLimits:
        notes = list(unenforced_here(self.policy.network, self.bwrap))
        self._quota = DiskQuota(self.workspace, self.policy.disk_mb * MIB)
        if self._quota.before.too_deep:  # what a call wrote down there could be neither counted nor removed
            raise ToolFailure(
                f"refused: the workspace is nested more than {MAX_DEPTH} directories deep, so its disk quota "
                "(sandbox.disk_mb) cannot be measured; no sandboxed call runs until the deep tree is removed"
            )
        self._next_disk_check = time.monotonic() + DISK_CHECK_SECONDS
        try:
            notes += self._open_group()
            program = working_seccomp(self.bwrap, self.policy.network).program if self.bwrap else None
            if program is not None:
                self.seccomp_fd = open_program(program)
        except BaseException:
            self._release()
            raise
        self.unenforced = tuple(notes)
        warn_once(self.unenforced)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._release()  # every process of the call is gone after this
        if kind is None:
            self.disk = self._quota.settle()

    def _open_group(self) -> list[str]:
        """The call's control group; a note instead when this call cannot have one."""
        support = probe_cgroups()
        if not support.usable:
            return []  # already in unenforced_here
        tasks = self.policy.max_processes + (BWRAP_TASKS if self.bwrap else 0)
        try:
            self._group = CallCgroup(support, CgroupLimits(self.policy.memory_mb * MIB, tasks))
        except CgroupError as error:
            return [f"memory and process totals for this call ({error.strerror})"]
        return []

    def _release(self) -> None:
        try:
            if self._group is not None:
                self.events = self._group.events()
                self._group.close()
        finally:
            if self.seccomp_fd is not None:
                os.close(self.seccomp_fd)
                self.seccomp_fd = None

    @property
    def pass_fds(self) -> tuple[int, ...]:
        return () if self.seccomp_fd is None else (self.seccomp_fd,)

    @property
    def before_start(self) -> Callable[[int], None] | None:
        return None if self._group is None else self._group.place

    @property
    def watch(self) -> Watch:
        return Watch(self._check, WATCH_SECONDS)

    def _check(self) -> bool:
        """True stops the call: a process was killed for memory, or the workspace is over quota."""
        if self._group is not None and self._group.events().oom_kills:
            return True
        started = time.monotonic()
        if started < self._next_disk_check:
            return False
        over = self._quota.exceeded_now()
        spent = time.monotonic() - started
        # walking a large workspace takes time: spend at most about a tenth of the call on it
        self._next_disk_check = time.monotonic() + max(DISK_CHECK_SECONDS, 10 * spent)
        return over


@functools.cache
def unenforced_here(network: bool, bwrap: str | None) -> tuple[str, ...]:
    """The per-call limits this host cannot apply (facts of the host, found once)."""
    notes = []
    cgroups = probe_cgroups()
    if not cgroups.usable:
        notes.append(f"memory and process totals per call, only per-process limits apply ({cgroups.reason})")
    if bwrap is not None:
        if "--size" not in bwrap_options(bwrap):
            notes.append("a size for /tmp and /dev/shm (this bubblewrap has no --size; 0.5 or later has)")
        seccomp = working_seccomp(bwrap, network)
        if seccomp.program is None:
            notes.append(f"the seccomp filter ({seccomp.reason})")
        elif seccomp.unknown:
            notes.append(f"the seccomp filter for {', '.join(seccomp.unknown)} (unknown to this libseccomp)")
    return tuple(notes)


@functools.cache
def working_seccomp(bwrap: str | None, network: bool) -> SeccompFilter:
    """The filter, if bubblewrap accepts it on this kernel (tried once with ``true``)."""
    built = seccomp_filter(network)
    if built.program is None or bwrap is None:
        return built
    fd = open_program(built.program)
    try:
        policy = SandboxPolicy(network=network, wall_seconds=20.0, max_output_bytes=4096)
        argv = [*bwrap_argv(bwrap, policy, None, seccomp_fd=fd), "/usr/bin/true"]
        outcome = run_bounded(
            argv, env={}, cwd=None, wall_seconds=20.0, max_output_bytes=4096, run_as=sandbox_user(), pass_fds=(fd,)
        )
    except OSError as error:
        return SeccompFilter(None, f"cannot start bwrap with it: {error}")
    finally:
        os.close(fd)
    if outcome.returncode != 0:
        detail = outcome.stderr.decode("utf-8", "replace").strip()[:300] or f"exit code {outcome.returncode}"
        return SeccompFilter(None, f"bubblewrap refused it: {detail}")
    return built


@functools.cache
def warn_once(unenforced: tuple[str, ...]) -> None:
    """Log what is not enforced, once per process for each distinct list."""
    if unenforced:
        _log.warning("runner: sandbox: not enforced on this host: %s", "; ".join(unenforced))
