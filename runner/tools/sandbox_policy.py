"""The limits of one sandboxed command, apart from the sandbox that applies them.

Every tool context carries a :class:`SandboxPolicy`; only a run that starts a command needs
:mod:`runner.tools.sandbox` and what it brings (control groups, disk quotas, seccomp).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class SandboxPolicy:
    """Limits for one sandboxed command (the agent YAML's ``sandbox:`` block).

    ``memory_mb`` and ``max_processes`` bound each process and, where control groups
    work, the whole call; ``tmp_mb`` sizes the sandbox's ``/tmp`` and ``/dev/shm``;
    ``disk_mb`` is the most the run's workspace may hold after a call.
    """

    mode: Literal["bwrap", "none"] = "bwrap"
    cpu_seconds: int = 10
    memory_mb: int = 512
    wall_seconds: float = 30.0
    max_processes: int = 64
    max_file_mb: int = 64
    max_output_bytes: int = 65536
    max_open_files: int = 256
    network: bool = False
    tmp_mb: int = 64
    disk_mb: int = 1024
