"""Runs left ``running`` by a process that is gone.

A run records its status when it ends; a process that is killed (SIGKILL, an OOM kill, a
lost machine) or that cannot reach its run store when it ends (locked, down) leaves its row
``running``. Each attempt records which process runs it (host, pid and the kernel's start
time of that process, :func:`runner.processes.process_start`), so whenever a store
is opened, a ``running`` row whose process on this machine is gone (or whose pid now names
another process) is recorded as ``failed`` with ``error_kind`` :data:`ABANDONED`, fenced
by its attempt token (a resumed attempt is never touched). A process on another machine
cannot be seen from here: its runs stay ``running`` until that machine opens the store.
"""

from __future__ import annotations

import functools
import os
import socket

from runner.processes import process_alive, process_start
from runner.store.database import Database

ABANDONED = "interrupted"
"""The ``error_kind`` of a run whose process ended without recording how the run ended."""


def this_process() -> tuple[str, int, str | None]:
    """``(host, pid, start time)`` of this process, as a run's holder columns hold them."""
    return _process(os.getpid())


@functools.lru_cache(maxsize=1)
def _process(pid: int) -> tuple[str, int, str | None]:
    # read from /proc once per process (keyed by pid: a forked child asks again), not once per run
    return socket.gethostname(), pid, process_start(pid)


def settle_abandoned(db: Database, now: str) -> list[str]:
    """Record each run a dead process of this machine left ``running`` as failed (interrupted);
    the run ids settled. Safe to repeat and to race: each update is fenced by its token."""
    rows = db.rows(
        "SELECT run_id, attempt_token, holder_host, holder_pid, holder_started FROM runs"
        " WHERE status = 'running' AND holder_pid IS NOT NULL AND holder_host = ?",
        (socket.gethostname(),),
    )
    settled = []
    for row in rows:
        if process_alive(row["holder_host"], int(row["holder_pid"]), row["holder_started"]):
            continue
        error = (
            f"interrupted: the process that ran this attempt (pid {row['holder_pid']} on {row['holder_host']}) ended "
            "before it recorded how the run ended (it was killed, or the run store was locked or unreachable then); "
            f"rerun with --run-id {row['run_id']} to resume it"
        )
        done = db.execute(
            "UPDATE runs SET status = 'failed', error = ?, error_kind = ?, finished_at = ?"
            " WHERE run_id = ? AND status = 'running' AND attempt_token = ?",
            (error, ABANDONED, now, row["run_id"], row["attempt_token"]),
            idempotent=True,
        )
        if done:
            settled.append(str(row["run_id"]))
    return settled
