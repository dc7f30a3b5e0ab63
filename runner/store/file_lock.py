"""A lock held by a process for as long as it lives: an exclusive ``flock`` on a lock file.

The batch journal's SQLite file and a local output file are held this way, for the whole
batch (:mod:`runner.batch.journal_sqlite`, :mod:`runner.batch.output`); a shared store uses
PostgreSQL's session locks instead (:mod:`runner.store.session_lock`).
"""

from __future__ import annotations

import errno
import fcntl
import os
from collections.abc import Callable
from pathlib import Path

from runner.errors import UsageError


def held_lock_file(lock_path: Path, what: str, busy: Callable[[int], str], *, mode: int = 0o600) -> int:
    """``lock_path`` opened (created if missing) and held with an exclusive ``flock``: its
    descriptor. The kernel drops the lock when the process dies, even by ``kill -9``. When
    another process holds it: :class:`UsageError` with ``busy(fd)`` (which may read what the
    holder wrote into the lock). ``what`` names the lock when a link was planted: a symbolic
    link is not followed, and a hard link is refused (whatever the holder writes into its
    lock would reach the link's other name)."""
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, mode)
    except OSError as error:
        if error.errno != errno.ELOOP:
            raise
        raise UsageError(f"{lock_path} ({what}) is a symbolic link, which the runner does not follow; "
                         "remove it (the runner makes its own)") from None  # fmt: skip
    if os.fstat(fd).st_nlink > 1:
        os.close(fd)
        raise UsageError(f"{lock_path} ({what}) is a hard link to another file, which the runner would "
                         "overwrite; remove it (the runner makes its own)")  # fmt: skip
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        try:
            message = busy(fd)
        finally:
            os.close(fd)  # also when ``busy`` fails reading what the holder wrote
        raise UsageError(message) from None
    return fd
