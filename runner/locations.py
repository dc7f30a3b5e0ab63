"""Where output files go: a local path, or a URL of any filesystem fsspec knows (``s3://``,
``gs://``, ``abfs://``, ``memory://``, ...), so reports and batch outputs can land where every
worker reads them.

A location is a :class:`pathlib.Path` for a local path (``file://`` URLs included, so local
writes stay atomic: a temporary file renamed over the target) and a ``UPath`` (universal_pathlib,
a ``pathlib``-like face on fsspec) for any other URL. Both support ``/``, ``name``,
``suffix``, ``parent``, ``is_file()`` and ``read_text()``; writing goes through
:func:`write_bytes` / :func:`upload_file` / :func:`upload_tree`, which write a remote object
in one request (an object store never shows half an object). The filesystem's credentials
are its own (fsspec reads ``AWS_*``, ``~/.aws``, instance roles, ...); the runner never
handles them.

A storage that accepts a connection and never answers would hold a run or a batch for ever
(fsspec has no deadline of its own for most filesystems): each remote operation runs through
:func:`bounded`, which gives up after ``$RUNNER_REMOTE_TIMEOUT_SECONDS`` (default
:data:`DEFAULT_REMOTE_SECONDS`) with :class:`RemoteTimedOut` naming the operation and the fix.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, Union
from urllib.parse import unquote, urlsplit

from runner.env_seconds import env_seconds
from runner.errors import RunnerError, UsageError
from runner.files import write_atomic

if TYPE_CHECKING:
    from upath import UPath

Location = Union[Path, "UPath"]
"""A local :class:`~pathlib.Path` or a remote ``UPath``."""


T = TypeVar("T")
REMOTE_SECONDS_ENV = "RUNNER_REMOTE_TIMEOUT_SECONDS"
"""The environment variable that sets how long one remote write (or read of a lock) may take."""
DEFAULT_REMOTE_SECONDS = 120.0
MAX_REMOTE_SECONDS = 86_400.0


class RemoteTimedOut(RunnerError, TimeoutError):
    """A remote storage operation did not finish within its deadline (the storage does not
    answer). A ``TimeoutError`` too, so code that treats storage failures as ``OSError``
    (report delivery, a lock's renewal) treats this one the same way."""


def remote_seconds() -> float:
    """``$RUNNER_REMOTE_TIMEOUT_SECONDS`` as a number of seconds (default :data:`DEFAULT_REMOTE_SECONDS`);
    :class:`UsageError` naming the variable for a value that is not a positive number."""
    return env_seconds(REMOTE_SECONDS_ENV, DEFAULT_REMOTE_SECONDS, MAX_REMOTE_SECONDS, example=120)


def bounded(what: str, call: Callable[[], T], seconds: float | None = None) -> T:
    """``call()`` (one remote operation, described by ``what``), or :class:`RemoteTimedOut`
    after ``seconds`` (default :func:`remote_seconds`). A call that hangs is left in a daemon
    thread: Python cannot stop it, but nothing waits for it and the process can exit."""
    limit = remote_seconds() if seconds is None else seconds
    outcome: dict[str, Any] = {}

    def attempt() -> None:
        try:
            outcome["value"] = call()
        except BaseException as exc:  # handed to the caller's thread, raised there
            outcome["error"] = exc

    worker = threading.Thread(target=attempt, daemon=True, name=f"remote: {what}"[:60])
    worker.start()
    worker.join(limit)
    if worker.is_alive():
        raise RemoteTimedOut(
            f"{what}: the storage did not answer within {limit:g} s; check that it is reachable and accepts writes, "
            f"or allow more time with {REMOTE_SECONDS_ENV}"
        )
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]  # type: ignore[no-any-return]


def is_url(value: str | os.PathLike[str] | Location) -> bool:
    """Whether ``value`` is a URL (``scheme://...``) rather than a plain path."""
    if not isinstance(value, str):
        return not isinstance(value, os.PathLike)  # a UPath is not os.PathLike; a Path is
    scheme, sep, _ = value.partition("://")
    return bool(sep) and scheme.replace("+", "").replace("-", "").replace(".", "").isalnum()


def location(value: str | os.PathLike[str] | Location) -> Location:
    """``value`` as a location: a :class:`Path` for a local path or ``file://`` URL, else a ``UPath``.

    A URL whose filesystem is unknown, or whose fsspec implementation is not installed
    (``s3://`` needs ``s3fs``), is refused with a :class:`~runner.errors.UsageError` saying so.
    """
    if isinstance(value, Path):
        return value
    if isinstance(value, os.PathLike):
        return Path(os.fspath(value))
    if not isinstance(value, str):
        return value  # already a UPath
    if not is_url(value):
        return Path(value)
    parts = urlsplit(value)
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise UsageError(f"{value}: a file:// URL names a local path (file:///path), not host {parts.netloc!r}")
        return Path(unquote(parts.path))
    try:
        from upath import UPath
    except ImportError:  # pragma: no cover - universal_pathlib is in the remote extra (and comes with Airflow)
        raise UsageError(f"{value}: writing to a URL needs fsspec and universal_pathlib: pip install 'runner[remote]'") from None
    try:
        remote = UPath(value)
        bounded(f"opening {shown(remote)}", lambda: remote.fs)  # resolves the filesystem now: a missing driver fails here, by name
    except (ImportError, ValueError) as exc:
        raise UsageError(f"{value}: cannot use this location: {exc}") from None
    return remote


def is_remote(target: Location) -> bool:
    """Whether ``target`` is not on the local disk."""
    return not isinstance(target, Path)


def write_bytes(target: Location, data: bytes) -> Location:
    """Write ``data`` to ``target`` whole or not at all; parent directories are created."""
    if isinstance(target, Path):
        return write_atomic(target, data)
    remote = target

    def write() -> None:
        remote.parent.mkdir(parents=True, exist_ok=True)
        remote.write_bytes(data)

    bounded(f"writing {shown(remote)}", write)
    return target


def write_text(target: Location, text: str) -> Location:
    """:func:`write_bytes` for UTF-8 text."""
    return write_bytes(target, text.encode("utf-8"))


def read_text(target: Location) -> str:
    """The UTF-8 text of ``target`` (``FileNotFoundError`` when there is none)."""
    if isinstance(target, Path):
        return target.read_text(encoding="utf-8")
    remote = target
    return bounded(f"reading {shown(remote)}", lambda: remote.read_text(encoding="utf-8"))


def upload_file(source: Path, target: Location) -> Location:
    """Copy the local file ``source`` to the remote ``target`` in one request."""
    assert not isinstance(target, Path), "a local target is written in place"
    remote = target

    def put() -> None:
        remote.parent.mkdir(parents=True, exist_ok=True)
        remote.fs.put_file(str(source), remote.path)

    bounded(f"uploading {shown(remote)}", put)
    return target


def upload_tree(source: Path, target: Location) -> Location:
    """Copy every file under the local directory ``source`` to the remote directory ``target``."""
    for path in sorted(source.rglob("*")):
        if path.is_file() and not path.is_symlink():
            upload_file(path, target.joinpath(*path.relative_to(source).parts))
    return target


def shown(target: Location | str) -> str:
    """A remote location without credentials (a URL's user info is never shown)."""
    parts = urlsplit(str(target))
    return f"{parts.scheme}://{parts.hostname or ''}{parts.path}" if parts.scheme else str(target)
