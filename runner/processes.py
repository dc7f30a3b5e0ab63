"""Whether a process that wrote a row still lives: its host, pid and kernel start time.

A pid alone is reused; ``<boot id>:<start ticks>`` from ``/proc`` names one process for the
life of the machine. Used for cap reservations' holders (:mod:`runner.store.cap_holders`), sandbox cgroups (:mod:`runner.tools.cgroups`),
runs left ``running`` (:mod:`runner.store.abandoned`) and lock objects
(:mod:`runner.batch.output_lock_object`).
"""

from __future__ import annotations

import os
import socket
from pathlib import Path


def process_start(pid: int) -> str | None:
    """``<boot id>:<start ticks>`` of process ``pid`` (``None`` where ``/proc`` does not tell)."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()  # after the command name, which may hold spaces
    return f"{boot}:{fields[19]}" if len(fields) > 19 else None


def process_alive(host: str, pid: int, started: str | None) -> bool:
    """Whether process ``pid`` on ``host`` (started at ``started``, :func:`process_start`) may
    still live: one on another machine cannot be seen from here and counts as alive."""
    if host != socket.gethostname():
        return True  # another machine's process cannot be seen from here: keep counting it
    if started:
        return process_start(pid) == started
    return pid_alive(pid)


def pid_alive(pid: int) -> bool:
    """Whether some process ``pid`` runs on this machine (one of another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
