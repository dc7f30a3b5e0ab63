"""Run one process with a wall-clock timeout and a cap on captured output.

Output is read in chunks as it arrives and the cap is enforced while reading (a flooding
child is killed, not buffered). The process is started in a new session and its whole
process group is killed when the run ends, whatever the reason. No ``preexec_fn``: the
runner is multi-threaded, so user and group switching goes through ``Popen`` arguments.

Work that must happen between the start of the process and the start of the command
(putting it into a control group, so that nothing it forks escapes) uses a gate instead:
the process starts as ``/bin/sh`` waiting for one line on its stdin and only then execs
the command; the line is sent after ``before_start`` has returned. A checker can also
watch the process while it runs and stop it (a disk quota, a memory event).
"""

from __future__ import annotations

import contextlib
import math
import os
import selectors
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

_CHUNK = 65536
GATE_LINE = b"go\n"
GATE_EXIT = 125
GATE = ("/bin/sh", "-c", f'IFS= read -r gate && [ "$gate" = go ] && exec "$@"; exit {GATE_EXIT}', "runner-gate")
"""Waits for :data:`GATE_LINE` on stdin (``read`` takes one byte at a time from a pipe, so
the command's own stdin follows untouched), then becomes the command."""

End = Literal["exited", "timed_out", "truncated", "stopped"]


@dataclass(frozen=True)
class ProcessOutcome:
    """How a bounded process run ended.

    ``returncode`` follows :class:`subprocess.Popen` (negative: killed by that signal);
    it is ``None`` only when the run was cut short before the process exited.
    """

    returncode: int | None
    stdout: bytes
    stderr: bytes
    timed_out: bool = False
    truncated: bool = False
    stopped: bool = False


@dataclass(frozen=True)
class Watch:
    """A check made about every ``every_seconds`` while the process runs; True stops it."""

    check: Callable[[], bool]
    every_seconds: float = 0.25


@dataclass
class _Streams:
    stdout: bytearray
    stderr: bytearray
    cap: int
    truncated: bool = False

    def add(self, name: str, data: bytes) -> None:
        room = self.cap - len(self.stdout) - len(self.stderr)
        if len(data) > room:
            data, self.truncated = data[: max(room, 0)], True
        (self.stdout if name == "stdout" else self.stderr).extend(data)


def run_bounded(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: Path | None,
    wall_seconds: float,
    max_output_bytes: int,
    stdin_data: bytes | None = None,
    run_as: int | None = None,
    pass_fds: Sequence[int] = (),
    before_start: Callable[[int], None] | None = None,
    watch: Watch | None = None,
) -> ProcessOutcome:
    """Run ``argv`` and collect at most ``max_output_bytes`` of stdout+stderr.

    ``run_as`` starts the process as that uid/gid with no supplementary groups (only
    possible when the runner is root). ``pass_fds`` stay open in the process.
    ``before_start(pid)`` runs while the process waits at its gate, before ``argv`` runs;
    if it raises, the process is killed without having run ``argv``. ``watch`` may stop
    the process while it runs. The process group is killed on timeout, on reaching the
    output cap, when stopped, and after a normal exit (stray background children).
    """
    if before_start is not None:
        argv = [*GATE, *argv]
        stdin_data = GATE_LINE + (stdin_data or b"")
    process = subprocess.Popen(  # argv built by the sandbox layer; never a shell
        list(argv),
        stdin=subprocess.PIPE if stdin_data is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=cwd,
        env=dict(env),
        start_new_session=True,
        close_fds=True,
        pass_fds=tuple(pass_fds),
        user=run_as,
        group=run_as,
        extra_groups=[] if run_as is not None else None,
    )
    streams = _Streams(bytearray(), bytearray(), max_output_bytes)
    try:
        if before_start is not None:
            before_start(process.pid)
        end = _pump(process, streams, stdin_data, time.monotonic() + wall_seconds, watch)
    finally:
        _kill_group(process)
        for pipe in (process.stdin, process.stdout, process.stderr):
            if pipe is not None:
                pipe.close()
        returncode = process.wait()
    cut_short = end != "exited"
    return ProcessOutcome(
        returncode=None if cut_short and returncode < 0 else returncode,
        stdout=bytes(streams.stdout),
        stderr=bytes(streams.stderr),
        timed_out=end == "timed_out",
        truncated=streams.truncated,
        stopped=end == "stopped",
    )


def _pump(
    process: subprocess.Popen[bytes], streams: _Streams, stdin_data: bytes | None, deadline: float, watch: Watch | None
) -> End:
    """Move data until the process exits, the deadline passes, the cap is hit or the watch stops it.

    The process is never reaped here, so its process group id stays valid for the kill
    that follows.
    """
    with selectors.DefaultSelector() as selector:
        assert process.stdout is not None and process.stderr is not None
        selector.register(process.stdout, selectors.EVENT_READ, "stdout")
        selector.register(process.stderr, selectors.EVENT_READ, "stderr")
        exit_fd = _register_exit(selector, process.pid)
        pending = memoryview(stdin_data or b"")
        if process.stdin is not None:
            os.set_blocking(process.stdin.fileno(), False)
            selector.register(process.stdin, selectors.EVENT_WRITE, "stdin")
        exited = False
        next_check = time.monotonic() + watch.every_seconds if watch else math.inf
        try:
            while not streams.truncated:
                now = time.monotonic()
                if not exited and now >= next_check:
                    assert watch is not None
                    if watch.check():
                        return "stopped"
                    next_check = time.monotonic() + watch.every_seconds
                remaining = 0.0 if exited else deadline - now
                if remaining < 0:
                    return "timed_out"
                events = selector.select(min(remaining, max(next_check - now, 0.0)))
                if not events and exited:
                    return "exited"  # drained what the exited process left in the pipes
                for key, _ in events:
                    if key.data == "exit":
                        exited = True
                        selector.unregister(key.fileobj)
                    elif key.data == "stdin":
                        pending = _feed(process, selector, pending)
                    else:
                        _read(selector, key, streams)
                if not _reading(selector) and (exited or exit_fd is None):
                    return "exited"
            return "truncated"
        finally:
            if exit_fd is not None:
                os.close(exit_fd)


def _register_exit(selector: selectors.BaseSelector, pid: int) -> int | None:
    """Watch for the process's exit through a pidfd (Linux >= 5.3); None if unsupported."""
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None
    selector.register(fd, selectors.EVENT_READ, "exit")
    return fd


def _feed(process: subprocess.Popen[bytes], selector: selectors.BaseSelector, pending: memoryview) -> memoryview:
    assert process.stdin is not None
    try:
        pending = pending[os.write(process.stdin.fileno(), pending[:_CHUNK]) :]
    except BlockingIOError:
        return pending
    except BrokenPipeError:  # the child closed its stdin: nothing more to send
        pending = pending[len(pending) :]
    if not pending:
        selector.unregister(process.stdin)
        process.stdin.close()
    return pending


def _read(selector: selectors.BaseSelector, key: selectors.SelectorKey, streams: _Streams) -> None:
    try:
        data = os.read(key.fd, _CHUNK)
    except BlockingIOError:
        return
    if data:
        streams.add(key.data, data)
    else:
        selector.unregister(key.fileobj)


def _reading(selector: selectors.BaseSelector) -> bool:
    return any(key.data in ("stdout", "stderr") for key in selector.get_map().values())


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
