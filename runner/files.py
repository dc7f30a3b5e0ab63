"""Files written whole or not at all: a temporary file in the same directory, synced, then
os.replace. Readers see the old file or the complete new one, never a half-written one."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

FILE_MODE = 0o644


def write_atomic(path: Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` so that readers see the old file or the new one, never half.

    Parent directories are created. Returns ``path``.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(descriptor, "wb") as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
        os.chmod(temporary, FILE_MODE)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return path


def write_text_atomic(path: Path, text: str) -> Path:
    """:func:`write_atomic` for UTF-8 text; a lone surrogate (model or tool text may hold one)
    is written as its ``\\udXXX`` escape instead of failing the whole file."""
    return write_atomic(path, text.encode("utf-8", "backslashreplace"))

@contextlib.contextmanager
def replacing(path: Path) -> Iterator[Path]:
    """A temporary path next to ``path``; when the block succeeds it is synced and renamed over ``path``.

    Readers see the old file or the complete new one, never a half-written one; on error the
    temporary file is removed and ``path`` is left as it was.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    temp = Path(name)
    try:
        yield temp
        with temp.open("rb") as handle:
            os.fsync(handle.fileno())
        os.chmod(temp, FILE_MODE)  # mkstemp made it 0600: readable like any file the runner writes
        os.replace(temp, path)
    finally:
        temp.unlink(missing_ok=True)
