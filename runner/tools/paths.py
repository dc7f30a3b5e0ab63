"""Workspace confinement for file access: no escapes, no links, no races.

Paths from the model are checked lexically (no NUL, not absolute, no ``..``) and then
opened relative to a directory fd of the workspace root with ``openat2(RESOLVE_BENEATH |
RESOLVE_NO_SYMLINKS)``, so a symlink anywhere in the path (even one swapped in during the
call) is refused by the kernel. Where ``openat2`` is missing (Linux < 5.6, some seccomp
profiles) the path is walked one component at a time with ``O_NOFOLLOW`` directory fds.
Files with more than one hard link are refused. Writes go to a temporary name in the
target directory and are renamed over the target, both relative to the directory fd.

Host-side work on a workspace follows the same rules through :func:`open_beneath`: the
run's workspace set-up (:mod:`runner.runs.workspace`), the snapshot that finds what
sandboxed code wrote (:mod:`runner.tools.written`) and artifact collection for reports
(:mod:`runner.reports.artifacts`).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import platform
import re
import secrets
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runner.errors import ToolFailure

if TYPE_CHECKING:
    import ctypes

_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_NO_SYMLINKS = 0x04
_RESOLVE_BENEATH = 0x08
_SYS_OPENAT2 = {"x86_64": 437, "aarch64": 437, "arm64": 437}
_MAX_PATH = 4096
MAX_PATH_DEPTH = 32
"""Components a model-given path may have: the file tools never make a tree deeper than the
disk quota can measure (``disk_quota.MAX_DEPTH``), or than host-side walks handle."""
# Names a report cannot show faithfully: control characters, and bytes that are not UTF-8
# (os.fsdecode turns those into lone surrogates).
_UNREPORTABLE = re.compile(r"[\x00-\x1f\x7f\ud800-\udfff]")


class WorkspacePathError(ToolFailure):
    """A path the model gave is refused or cannot be opened inside the workspace."""


@dataclass(frozen=True)
class Entry:
    """One workspace entry as listed (links are reported, never followed)."""

    path: str
    kind: str  # file | dir | symlink | other
    size: int


@functools.cache
def _open_how() -> Any:
    """``struct open_how`` of openat2(2); ctypes is loaded by the first confined open, not at import."""
    import ctypes

    class OpenHow(ctypes.Structure):
        _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]

    return OpenHow


def split_relative(path: str, *, allow_root: bool = False) -> list[str]:
    """Check a model-given path lexically; return its components.

    Refuses NUL bytes, absolute paths, ``..`` components and (unless ``allow_root``)
    paths naming the workspace itself.
    """
    if "\0" in path:
        raise WorkspacePathError("refused: the path contains a NUL byte")
    if len(path) > _MAX_PATH:
        raise WorkspacePathError(f"refused: the path is longer than {_MAX_PATH} characters")
    if path.startswith("/"):
        raise WorkspacePathError(f"refused: '{path}' is absolute; give a path relative to the workspace")
    parts = [part for part in path.split("/") if part not in ("", ".")]
    if len(parts) > MAX_PATH_DEPTH:
        raise WorkspacePathError(f"refused: the path is nested {len(parts)} levels deep; at most {MAX_PATH_DEPTH} are allowed")
    if ".." in parts:
        raise WorkspacePathError(f"refused: '{path}' contains '..'; paths must stay in the workspace")
    if not parts and not allow_root:
        raise WorkspacePathError("refused: the path names the workspace itself, not a file")
    return parts


def reportable_path(path: str) -> str:
    """``path`` in canonical form (no empty or ``.`` segments) if a report may name it.

    Refuses what :func:`split_relative` refuses, plus control characters and names that
    are not valid UTF-8 (:class:`WorkspacePathError`).
    """
    parts = split_relative(path)
    if _UNREPORTABLE.search(path):
        raise WorkspacePathError(f"refused: {path!r} contains control characters or bytes that are not UTF-8")
    return "/".join(parts)


def read_workspace_file(root: Path, path: str, max_bytes: int) -> bytes:
    """Read at most ``max_bytes`` of a regular, singly-linked file under ``root``."""
    with _opened(root, split_relative(path), os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY) as fd:
        _require_plain_file(fd, path)
        chunks: list[bytes] = []
        remaining = max_bytes
        while remaining > 0 and (chunk := os.read(fd, min(remaining, 1 << 20))):
            chunks.append(chunk)
            remaining -= len(chunk)
        return b"".join(chunks)


def workspace_file_size(root: Path, path: str) -> int:
    """Size of a regular, singly-linked file under ``root``."""
    with _opened(root, split_relative(path), os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY) as fd:
        return _require_plain_file(fd, path).st_size


def write_workspace_file(
    root: Path, path: str, data: bytes, *, make_parents: bool = True, quota_bytes: int | None = None
) -> None:
    """Atomically replace ``path`` under ``root`` with ``data`` (temp file + rename).

    With ``quota_bytes`` (the run's ``sandbox.disk_mb``), a write that would take the workspace
    past it is refused: the file tools write on the host, where the sandbox's quota watch does
    not look, and a table saved again and again under new names would fill the disk."""
    parts = split_relative(path)
    if quota_bytes is not None:
        _require_room(root, len(data), quota_bytes)
    with _root_fd(root) as root_fd, _directory(root_fd, parts[:-1], make_parents) as dir_fd:
        temp = f".{parts[-1][:64]}.{secrets.token_hex(8)}.tmp"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(temp, flags, 0o644, dir_fd=dir_fd)
        try:
            with os.fdopen(fd, "wb", closefd=False) as handle:
                handle.write(data)
            _match_owner(fd, root_fd)
            os.replace(temp, parts[-1], src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except OSError as error:
            with contextlib.suppress(OSError):
                os.unlink(temp, dir_fd=dir_fd)
            raise _failure(error, path) from None
        finally:
            os.close(fd)


def _require_room(root: Path, size: int, quota_bytes: int) -> None:
    from runner.tools.disk_quota import ENTRY_BYTES, scan

    used = scan(root, stop_above=quota_bytes).total
    if used + max(size, ENTRY_BYTES) > quota_bytes:
        raise WorkspacePathError(
            f"refused: writing {size:,} bytes would take the workspace past its disk quota of "
            f"{quota_bytes / (1024 * 1024):g} MB (sandbox.disk_mb); {used:,} bytes are in use"
        )


def list_workspace_files(
    root: Path, path: str = ".", *, recursive: bool = True, max_entries: int = 1000
) -> list[Entry]:
    """Entries under ``path`` (sorted, at most ``max_entries``); links are not followed."""
    parts = split_relative(path, allow_root=True)
    entries: list[Entry] = []
    with _root_fd(root) as root_fd, _directory(root_fd, parts, create=False) as dir_fd:
        prefix = "/".join(parts)
        _list_into(entries, dir_fd, prefix, recursive, max_entries)
    return entries


def make_workspace_dirs(root: Path, path: str) -> None:
    """Create ``path`` (and parents) under ``root`` without following links."""
    with _root_fd(root) as root_fd, _directory(root_fd, split_relative(path), create=True):
        pass


# --- opening beneath the root ----------------------------------------------------------


@contextlib.contextmanager
def _root_fd(root: Path) -> Iterator[int]:
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        yield fd
    finally:
        os.close(fd)


@contextlib.contextmanager
def _opened(root: Path, parts: list[str], flags: int) -> Iterator[int]:
    with _root_fd(root) as root_fd:
        try:
            fd = open_beneath(root_fd, "/".join(parts), flags)
        except OSError as error:
            raise _failure(error, "/".join(parts)) from None
        try:
            yield fd
        finally:
            os.close(fd)


@contextlib.contextmanager
def _directory(root_fd: int, parts: list[str], create: bool) -> Iterator[int]:
    """A directory fd for ``parts`` under ``root_fd``, created one level at a time."""
    fd = os.dup(root_fd)
    try:
        for index, part in enumerate(parts):
            try:
                child = _child_directory(fd, part, create, root_fd)
            except OSError as error:
                raise _failure(error, "/".join(parts[: index + 1])) from None
            os.close(fd)
            fd = child
        yield fd
    finally:
        os.close(fd)


def _child_directory(fd: int, name: str, create: bool, root_fd: int) -> int:
    flags = os.O_RDONLY | os.O_DIRECTORY
    try:
        return open_beneath(fd, name, flags)
    except FileNotFoundError:
        if not create:
            raise
    with contextlib.suppress(FileExistsError):
        os.mkdir(name, 0o755, dir_fd=fd)
    child = open_beneath(fd, name, flags)
    _match_owner(child, root_fd)
    return child


def open_beneath(dir_fd: int, relative: str, flags: int, mode: int = 0) -> int:
    """Open ``relative`` under ``dir_fd`` refusing symlinks and escapes (OSError on refusal)."""
    flags |= os.O_CLOEXEC
    if _openat2_works():
        return _openat2(dir_fd, relative, flags, mode)
    return _walk_nofollow(dir_fd, relative, flags, mode)


def _openat2(dir_fd: int, relative: str, flags: int, mode: int) -> int:
    import ctypes

    how = _open_how()(
        flags, mode if flags & os.O_CREAT else 0,
        _RESOLVE_BENEATH | _RESOLVE_NO_SYMLINKS | _RESOLVE_NO_MAGICLINKS,
    )  # fmt: skip
    libc = _libc()
    fd = libc.syscall(
        _SYS_OPENAT2[platform.machine()], ctypes.c_int(dir_fd), os.fsencode(relative),
        ctypes.byref(how), ctypes.c_size_t(ctypes.sizeof(how)),
    )  # fmt: skip
    if fd < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), relative)
    return int(fd)


def _walk_nofollow(dir_fd: int, relative: str, flags: int, mode: int) -> int:
    parts = [part for part in relative.split("/") if part not in ("", ".")]
    if not parts or ".." in parts:
        raise OSError(errno.EXDEV, "path escapes the directory", relative)
    fd = os.dup(dir_fd)
    try:
        for part in parts[:-1]:
            child = _open_component(fd, part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, 0)
            os.close(fd)
            fd = child
        return _open_component(fd, parts[-1], flags | os.O_NOFOLLOW, mode)
    finally:
        os.close(fd)


def _open_component(dir_fd: int, name: str, flags: int, mode: int) -> int:
    """Open one name under ``dir_fd`` without following it; a symlink gives ELOOP."""
    try:
        return os.open(name, flags, mode, dir_fd=dir_fd)
    except NotADirectoryError:
        # O_DIRECTORY|O_NOFOLLOW on a symlink reports ENOTDIR; say what it really is.
        if stat.S_ISLNK(os.lstat(name, dir_fd=dir_fd).st_mode):
            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), name) from None
        raise


@functools.cache
def _libc() -> ctypes.CDLL:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


@functools.cache
def _openat2_works() -> bool:
    """Whether the kernel (and any seccomp filter) lets us call openat2."""
    if platform.system() != "Linux" or platform.machine() not in _SYS_OPENAT2:
        return False
    fd = os.open("/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.close(_openat2(fd, ".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, 0))
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


# --- checks and messages ------------------------------------------------------------------


def _require_plain_file(fd: int, path: str) -> os.stat_result:
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        raise WorkspacePathError(f"refused: '{path}' is not a regular file")
    if info.st_nlink > 1:
        raise WorkspacePathError(f"refused: '{path}' has {info.st_nlink} hard links; linked files are not read")
    os.set_blocking(fd, True)
    return info


def _match_owner(fd: int, root_fd: int) -> None:
    """Give files the runner creates the workspace's owner, so sandboxed code can edit them."""
    if os.geteuid() != 0:
        return
    owner = os.fstat(root_fd)
    os.fchown(fd, owner.st_uid, owner.st_gid)


def _failure(error: OSError, path: str) -> WorkspacePathError:
    code = error.errno
    if code == errno.ELOOP:
        return WorkspacePathError(f"refused: '{path}' goes through a symbolic link")
    if code == errno.EXDEV:
        return WorkspacePathError(f"refused: '{path}' leads outside the workspace")
    if code == errno.ENOENT:
        return WorkspacePathError(f"'{path}' does not exist in the workspace")
    if code == errno.ENOTDIR:
        return WorkspacePathError(f"'{path}': a parent of it is not a directory")
    if code == errno.EISDIR:
        return WorkspacePathError(f"'{path}' is a directory")
    return WorkspacePathError(f"'{path}': {os.strerror(code or 0)}")


def _list_into(entries: list[Entry], dir_fd: int, prefix: str, recursive: bool, limit: int) -> None:
    with os.scandir(dir_fd) as scan:
        children = sorted(scan, key=lambda e: e.name)
    for child in children:
        if len(entries) >= limit:
            return
        path = f"{prefix}/{child.name}" if prefix else child.name
        info = child.stat(follow_symlinks=False)
        kind = _kind(info.st_mode)
        entries.append(Entry(path=path, kind=kind, size=info.st_size if kind == "file" else 0))
        if recursive and kind == "dir":
            try:
                sub = open_beneath(dir_fd, child.name, os.O_RDONLY | os.O_DIRECTORY)
            except OSError:
                continue  # swapped for a link or removed since the scan
            try:
                _list_into(entries, sub, path, recursive, limit)
            finally:
                os.close(sub)


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISDIR(mode):
        return "dir"
    return "file" if stat.S_ISREG(mode) else "other"
