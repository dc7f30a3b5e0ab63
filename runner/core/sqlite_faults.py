"""SQLite failures that are the file's fault, not the code's, as one line naming the file and the fix.

A run store or batch journal can be truncated, overwritten, replaced by a directory, made
read-only, or held by another process; ``sqlite3`` then says ``file is not a database`` or
``database is locked`` without the file or a way out, and a caller that does not expect it
shows a traceback. :func:`file_faults` turns those errors (decided on SQLite's result code,
never on the message) into a :class:`~runner.errors.StoreDamaged` (exit 2: the file needs a
person) or a :class:`~runner.errors.StoreUnavailable` (exit 1: a later try may succeed). The
file is never deleted or replaced here: its rows stay for whoever recovers them. Used by the
run store and batch journal (:class:`runner.store.database.SqliteDatabase`) and by knowledge
indexes and agent memory (:mod:`runner.knowledge.store`).
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

from runner.errors import RunnerError, StoreDamaged, StoreUnavailable

_DAMAGED = {sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_CORRUPT}
_BUSY = {sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED}
_READ_ONLY = {sqlite3.SQLITE_READONLY, sqlite3.SQLITE_PERM, sqlite3.SQLITE_AUTH}
_UNREADABLE = {sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_FULL, sqlite3.SQLITE_NOLFS}


@contextlib.contextmanager
def file_faults(path: Path, role: str, busy_seconds: float) -> Iterator[None]:
    """Inside the block, an SQLite error about the file ``path`` (which holds the ``role``, e.g.
    "run store") is raised as :func:`fault` words it; any other error passes unchanged."""
    try:
        yield
    except sqlite3.Error as exc:
        translated = fault(exc, path, role, busy_seconds)
        if translated is None:
            raise
        raise translated from None


def fault(exc: sqlite3.Error, path: Path, role: str, busy_seconds: float) -> RunnerError | None:
    """The error for a person when ``exc`` is about the file itself, else ``None``."""
    code = _primary_code(exc)
    what = f"{path} (the {role})"
    keep = _keep_hint(path, role)
    if code in _DAMAGED:
        return StoreDamaged(f"{what} is not a readable SQLite database ({exc}); {keep}")
    if code in _BUSY:
        return StoreUnavailable(
            f"{what} is locked by another process (waited {busy_seconds:g} s: {exc}, {_code_name(exc)}); wait for it to finish "
            f"(`fuser {path}` names it) and run again"
        )
    if code in _READ_ONLY:
        return StoreDamaged(
            f"{what} cannot be written ({exc}); make it and its directory writable for this user, "
            "or set RUNNER_STATE_DIR to a writable directory"
        )
    if code in _UNREADABLE:
        if path.is_dir():
            return StoreDamaged(f"{what} is a directory, not an SQLite file; move it away (mv {path} {path}.moved) and run again")
        if code == sqlite3.SQLITE_FULL:
            return StoreUnavailable(f"{what}: the disk is full ({exc}); free space and run again")
        return StoreDamaged(f"cannot open or read {what} ({exc}); check the file and its directory, or {keep}")
    return None


def _primary_code(exc: sqlite3.Error) -> int:
    """SQLite's primary result code (``SQLITE_BUSY`` for ``SQLITE_BUSY_RECOVERY``): what is decided on."""
    return getattr(exc, "sqlite_errorcode", 0) & 0xFF


def _code_name(exc: sqlite3.Error) -> str:
    """SQLite's extended result code by name (``SQLITE_BUSY_RECOVERY``): which lock, for whoever investigates."""
    return getattr(exc, "sqlite_errorname", None) or f"SQLite code {getattr(exc, 'sqlite_errorcode', '?')}"


def wal_mode(connection: sqlite3.Connection, busy_seconds: float) -> None:
    """Put the file of ``connection`` in WAL mode, waiting up to ``busy_seconds`` for other processes.

    The switch reads the header and then writes it in one go; when two processes switch one new
    file at once, SQLite answers the second ``SQLITE_BUSY`` at once instead of calling the busy
    handler (waiting with a read lock held could deadlock), so the wait is here. Once the file
    is in WAL mode (kept in the file), the pragma changes nothing and takes no write lock.
    Each try's own busy wait is what remains of ``busy_seconds``, so the whole wait stays within
    it; the caller sets the connection's busy timeout afterwards."""
    deadline = time.monotonic() + busy_seconds
    pause = 0.005
    while True:
        try:
            connection.execute(f"PRAGMA busy_timeout={max(int((deadline - time.monotonic()) * 1000), 0)}")
            connection.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if _primary_code(exc) not in _BUSY or time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.1)


def _keep_hint(path: Path, role: str) -> str:
    """What to do with an unusable file: move it away (its rows kept for recovery); a journal may be discarded."""
    moved = f"mv {path} {path}.damaged"
    if role == "batch journal":
        return f"pass --restart to discard it and start the batch over, or move it away to keep it ({moved})"
    if role == "cap ledger":  # read by `runner caps`: the path may simply be the wrong file
        return f"check that --store names the ledger (a fan-out's caps.sqlite3, or a postgresql:// URL); if it is, move it away ({moved}) to keep its rows"
    if role == "knowledge index":  # derived from the sources: nothing is lost by rebuilding it
        return f"delete it (rm {path}); `runner index` rebuilds it from its sources"
    return f"move it away ({moved}; `sqlite3 {path.name}.damaged .recover` may salvage its rows) and run again to start a new one"
