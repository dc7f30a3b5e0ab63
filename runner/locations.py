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
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Union
from urllib.parse import unquote, urlsplit

from runner.errors import UsageError
from runner.files import write_atomic

if TYPE_CHECKING:
    from upath import UPath

Location = Union[Path, "UPath"]
"""A local :class:`~pathlib.Path` or a remote ``UPath``."""


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
        remote.fs  # noqa: B018  # resolves the filesystem now, so a missing driver fails here, by name
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
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)
    return target


def write_text(target: Location, text: str) -> Location:
    """:func:`write_bytes` for UTF-8 text."""
    return write_bytes(target, text.encode("utf-8"))


def upload_file(source: Path, target: Location) -> Location:
    """Copy the local file ``source`` to the remote ``target`` in one request."""
    assert not isinstance(target, Path), "a local target is written in place"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.fs.put_file(str(source), target.path)
    return target


def upload_tree(source: Path, target: Location) -> Location:
    """Copy every file under the local directory ``source`` to the remote directory ``target``."""
    for path in sorted(source.rglob("*")):
        if path.is_file() and not path.is_symlink():
            upload_file(path, target.joinpath(*path.relative_to(source).parts))
    return target
