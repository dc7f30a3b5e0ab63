"""Run one process with a wall-clock timeout and a cap on captured output.

Output is read in chunks as it arrives and the cap is enforced while reading (a flooding
child is killed, not buffered). The process is started in a new session and its whole
process group is killed when the run ends, whatever the reason. No ``preexec_fn``: the
runner is multi-threaded, so user and group switching goes through ``Popen`` arguments.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

_CHUNK = 65536


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
) -> ProcessOutcome:
    """Run ``argv`` and collect at most ``max_output_bytes`` of stdout+stderr.

    ``run_as`` starts the process as that uid/gid with no supplementary groups (only
    possible when the runner is root). The process group is killed on timeout, on
    reaching the output cap, and after a normal exit (stray background children).
    """
    process = subprocess.Popen(  # argv built by the sandbox layer; never a shell
        list(argv),
        stdin=subprocess.PIPE if stdin_data is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=cwd,
        env=dict(env),
        start_new_session=True,
        close_fds=True,
        user=run_as,
        group=run_as,
        extra_groups=[] if run_as is not None else None,
    )
    streams = _Streams(bytearray(), bytearray(), max_output_bytes)
    try:
        timed_out = _pump(process, streams, stdin_data, time.monotonic() + wall_seconds)
    finally:
        _kill_group(process)
        for pipe in (process.stdin, process.stdout, process.stderr):
            if pipe is not None:
                pipe.close()
        returncode = process.wait()
    cut_short = timed_out or streams.truncated
    return ProcessOutcome(
        returncode=None if cut_short and returncode < 0 else returncode,
        stdout=bytes(streams.stdout),
        stderr=bytes(streams.stderr),
        timed_out=timed_out,
        truncated=streams.truncated,
    )


def _pump(process: subprocess.Popen[bytes], streams: _Streams, stdin_data: bytes | None, deadline: float) -> bool:
    """Move data until the process exits, the deadline passes or the cap is hit.

    Returns whether the deadline passed. The process is never reaped here, so its
    process group id stays valid for the kill that follows.
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
        try:
            while not streams.truncated:
                remaining = 0.0 if exited else deadline - time.monotonic()
                if remaining < 0:
                    return True
                events = selector.select(remaining)
                if not events and exited:
                    return False  # drained what the exited process left in the pipes
                for key, _ in events:
                    if key.data == "exit":
                        exited = True
                        selector.unregister(key.fileobj)
                    elif key.data == "stdin":
                        pending = _feed(process, selector, pending)
                    else:
                        _read(selector, key, streams)
                if not _reading(selector) and (exited or exit_fd is None):
                    return False
            return False
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
