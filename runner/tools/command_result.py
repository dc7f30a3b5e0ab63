"""The outcome of one sandboxed command, and how the model is told about it."""

from __future__ import annotations

import signal
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from runner.tools.disk_quota import MIB, DiskReport

if TYPE_CHECKING:
    from runner.tools.sandbox_policy import SandboxPolicy

Exceeded = Literal["memory", "disk"]
"""A per-call total the command ran into (``None`` when it stayed within them)."""
_LISTED = 5


@dataclass(frozen=True)
class CommandResult:
    """The outcome of one sandboxed command, rendered for the model by :meth:`render`.

    ``exceeded`` names the per-call total that ended the call; ``disk`` says how the call
    left the workspace; ``unenforced`` lists limits this host could not apply to the call.
    """

    exit_code: int | None
    stdout: str
    stderr: str
    timed_out: bool
    truncated: bool
    policy: SandboxPolicy
    exceeded: Exceeded | None = None
    disk: DiskReport | None = None
    unenforced: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        """True when the command ran to completion within every limit and exited 0."""
        return self.exit_code == 0 and not self.timed_out and not self.truncated and self.exceeded is None

    def render(self) -> str:
        """Status line, notes, then stdout and stderr."""
        parts = [self.status(), *self.notes()]
        if self.stdout:
            parts.append(f"stdout:\n{self.stdout}")
        if self.stderr:
            parts.append(f"stderr:\n{self.stderr}")
        return "\n".join(parts)

    def status(self) -> str:
        """One line saying how the command ended."""
        if self.exceeded == "disk" and self.disk is not None:
            return _disk_status(self.disk)
        if self.exceeded == "memory":
            return (
                f"killed: the call's processes together exceeded its memory limit of {self.policy.memory_mb} MB "
                "(sandbox.memory_mb counts every process of the call and its /tmp)"
            )
        if self.timed_out:
            return f"killed: wall-clock limit of {self.policy.wall_seconds:g}s reached"
        if self.truncated:
            return f"killed: output exceeded {self.policy.max_output_bytes} bytes (truncated)"
        code = self.exit_code
        if code is not None and code > 128 and code - 128 in signal.valid_signals():
            name = signal.Signals(code - 128).name
            if name == "SIGSYS":
                return "killed by SIGSYS: a system call the sandbox forbids (seccomp filter)"
            return (
                f"killed by {name} (limits: cpu {self.policy.cpu_seconds}s, "
                f"memory {self.policy.memory_mb} MB, processes {self.policy.max_processes})"
            )
        return f"exit code {code}"

    def notes(self) -> list[str]:
        """Limits this host could not apply to the call."""
        if not self.unenforced:
            return []
        return [f"note: not enforced on this host: {'; '.join(self.unenforced)}"]


def _disk_status(disk: DiskReport) -> str:
    if disk.too_deep:
        what = "nested directories deeper than the quota can measure"
    else:
        what = f"made the workspace {_mb(disk.used)} MB"
    status = f"refused: the call {what}, over its disk quota of {_mb(disk.limit)} MB (sandbox.disk_mb)"
    if disk.removed:
        more = len(disk.removed) - _LISTED
        listed = ", ".join(_shown(path) for path in disk.removed[:_LISTED]) + (f" and {more} more" if more > 0 else "")
        status += f"; removed what the call wrote: {listed}"
    if disk.not_removed:
        status += f"; could not remove: {', '.join(_shown(path) for path in disk.not_removed[:_LISTED])}"
    return status


def _shown(path: str) -> str:
    """A file name the sandboxed code chose, safe to show: valid UTF-8, no control characters."""
    text = path.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    return "".join(ch if ch.isprintable() else "?" for ch in text)


def _mb(size: int) -> str:
    return f"{size / MIB:.1f}".removesuffix(".0")
