"""The disk quota of a run's workspace (``sandbox.disk_mb``), enforced around each sandboxed call.

``RLIMIT_FSIZE`` bounds one file; a call could still write a thousand of them (1.1 GB went
into a workspace in one call). The workspace lives on the host's disk, so its total is
measured: before a call (what was there), while it runs (the sandbox's watch stops the
call once the workspace passes its quota) and after it. A call that leaves the workspace
over its quota fails, and every entry it created or wrote to is removed, so the run goes
on with the workspace it had (less the files it changed: their old content is gone).

Why measure rather than mount a size-limited filesystem for the workspace: a tmpfs holds it
in RAM; a loop-mounted image needs a loop device, ``mkfs`` and host mounts that outlive a
crashed runner; filesystem quotas depend on the filesystem and its mount options.
Measuring works on any host; it cannot stop a write the instant it happens, so a call can
overshoot by what it writes between two measurements (each file still capped by
``max_file_mb``), and that overshoot is removed.

Charging: every entry costs at least one block (4 KiB), so floods of empty files or
directories count; a regular file costs its apparent size when that is more than its
blocks (a sparse file is full size once copied out). A hard link is charged again.

Safety: the walk never follows a symbolic link; each directory is opened relative to its
parent with ``O_NOFOLLOW`` and checked to be the one that was stat'ed; at most
:data:`MAX_DEPTH` descriptors are held, and a tree nested deeper cannot be measured and
counts as over quota. Removal uses the same descriptors (``unlinkat``/``rmdir`` relative
to a verified parent), so it cannot be steered outside the workspace.
"""

from __future__ import annotations

import contextlib
import os
import stat
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

MIB = 1024 * 1024
ENTRY_BYTES = 4096
MAX_DEPTH = 64
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(frozen=True)
class Charge:
    """What one workspace entry costs, and which inode it is."""

    inode: int
    bytes: int
    is_dir: bool
    modified_ns: int


@dataclass
class Inventory:
    """The workspace's entries (relative path -> charge) and their total.

    ``complete`` is False when the walk stopped early (over a limit, or too deep).
    """

    entries: dict[str, Charge] = field(default_factory=dict)
    total: int = 0
    too_deep: bool = False
    complete: bool = True


@dataclass(frozen=True)
class DiskReport:
    """How a call left the workspace: ``used`` bytes against ``limit``, and what was removed."""

    limit: int
    used: int
    exceeded: bool = False
    too_deep: bool = False
    removed: tuple[str, ...] = ()
    not_removed: tuple[str, ...] = ()


class DiskQuota:
    """The quota of one workspace around one call: measure before, watch, settle after."""

    def __init__(self, workspace: Path, limit_bytes: int):
        self.workspace, self.limit = workspace, limit_bytes
        self.before = scan(workspace)
        # a workspace seeded over its quota (task files) may be used, but not grown
        self.allowance = max(limit_bytes, self.before.total)
        self.peak = self.before.total
        self.went_too_deep = False

    def exceeded_now(self) -> bool:
        """Measure while the call runs (stops counting as soon as the allowance is passed)."""
        try:
            now = scan(self.workspace, stop_above=self.allowance)
        except OSError:
            return False  # the call is changing the tree under the walk; the check after it decides
        self.peak = max(self.peak, now.total)
        # a workspace already too deep cannot be measured at all: the call fails (fail closed)
        self.went_too_deep |= now.too_deep
        return now.total > self.allowance or self.went_too_deep

    def settle(self) -> DiskReport:
        """After the call (all its processes gone): remove its writes if it went over quota
        at any point it was measured (deleting the flood just before the end does not help)."""
        after = scan(self.workspace)
        too_deep = self.went_too_deep or after.too_deep
        used = max(after.total, self.peak)
        if used <= self.allowance and not too_deep:
            return DiskReport(self.limit, after.total)
        written = [path for path, charge in after.entries.items() if _written(self.before.entries.get(path), charge)]
        targets = topmost(written)
        failed = remove_entries(self.workspace, targets)
        return DiskReport(self.limit, used, True, too_deep, tuple(targets), tuple(failed))


def scan(root: Path, *, stop_above: int | None = None) -> Inventory:
    """Walk ``root`` without following links; stop early once the total passes ``stop_above``."""
    inventory = Inventory()
    stack: list[tuple[int, str, list[str]]] = []
    try:
        top = _open_readable(None, str(root))
        stack.append((top, "", _names(top)))
        while stack:
            fd, prefix, names = stack[-1]
            if not names:
                os.close(fd)
                stack.pop()
                continue
            name = names.pop()
            info = _lstat(fd, name)
            if info is None:
                continue  # gone while the call runs
            _charge(inventory, prefix + name, info)
            if stop_above is not None and inventory.total > stop_above:
                inventory.complete = False
                break
            if stat.S_ISDIR(info.st_mode):
                if len(stack) >= MAX_DEPTH:
                    inventory.too_deep, inventory.complete = True, False
                    continue
                child = _open_dir(fd, name, info)
                if child is not None:
                    stack.append((child, f"{prefix}{name}/", _names(child)))
    finally:
        for fd, _, _ in stack:
            os.close(fd)
    return inventory


def topmost(paths: list[str]) -> list[str]:
    """``paths`` without those inside another listed directory (removing it removes them), sorted."""
    listed = set(paths)
    return sorted(path for path in listed if not any(parent in listed for parent in _parents(path)))


def _parents(path: str) -> Iterator[str]:
    parts = path.split("/")
    return ("/".join(parts[:end]) for end in range(1, len(parts)))


def remove_entries(root: Path, paths: list[str]) -> list[str]:
    """Remove each workspace-relative path (a directory with all it holds), never following links.

    Returns the paths that could not be removed, each with the reason.
    """
    failed = []
    with _opened(_open_readable(None, str(root))) as root_fd:
        for path in paths:
            *parents, name = path.split("/")
            try:
                with _parent(root_fd, parents) as parent_fd:
                    _remove(parent_fd, name)
            except (FileNotFoundError, NotADirectoryError):
                continue  # already gone
            except OSError as error:
                failed.append(f"{path} ({error.strerror})")
    return failed


def remove_tree(path: Path) -> None:
    """Remove the directory ``path`` and all it holds, of any depth, never following a link
    (``shutil.rmtree`` recurses once per level: a tree a few thousand levels deep would raise
    ``RecursionError``). Raises :class:`OSError` when something cannot be removed."""
    with _opened(_open_readable(None, str(path.parent))) as parent_fd:
        _remove(parent_fd, path.name)


def _remove(parent_fd: int, name: str) -> None:
    """Remove ``name`` under ``parent_fd``; trees of any depth with at most MAX_DEPTH descriptors.

    A directory found at the depth limit is renamed up next to the tree's top and removed
    on its own afterwards, so the chain of open descriptors stays short.
    """
    queue = [name]
    while queue:
        top = queue.pop()
        info = _directory_or_unlink(parent_fd, top)
        if info is None:
            continue
        stack: list[tuple[int, int, str, list[str]]] = []  # (dir fd, its parent fd, its name, names left)
        try:
            fd = _open_dir(parent_fd, top, info)
            if fd is None:
                continue
            stack.append((fd, parent_fd, top, _names(fd)))
            while stack:
                fd, above, dirname, names = stack[-1]
                if not names:
                    os.close(fd)
                    stack.pop()
                    os.rmdir(dirname, dir_fd=above)
                    continue
                child = names.pop()
                child_info = _directory_or_unlink(fd, child)
                if child_info is None:
                    continue
                if len(stack) >= MAX_DEPTH:
                    moved = f".runner-removing-{uuid.uuid4().hex}"
                    os.rename(child, moved, src_dir_fd=fd, dst_dir_fd=parent_fd)
                    queue.append(moved)
                else:
                    child_fd = _open_dir(fd, child, child_info)
                    if child_fd is not None:
                        stack.append((child_fd, fd, child, _names(child_fd)))
        finally:
            for fd, _, _, _ in stack:
                os.close(fd)


def _written(before: Charge | None, after: Charge) -> bool:
    """Entries the call created, replaced or wrote to (a directory only when it is new).

    The modification time catches a file deleted and recreated under a recycled inode number.
    """
    if before is None or before.inode != after.inode or before.is_dir != after.is_dir:
        return True
    return not after.is_dir and (after.bytes, after.modified_ns) != (before.bytes, before.modified_ns)


def _charge(inventory: Inventory, path: str, info: os.stat_result) -> None:
    apparent = info.st_size if stat.S_ISREG(info.st_mode) else 0
    cost = max(ENTRY_BYTES, apparent, info.st_blocks * 512)
    inventory.entries[path] = Charge(info.st_ino, cost, stat.S_ISDIR(info.st_mode), info.st_mtime_ns)
    inventory.total += cost


def _lstat(dir_fd: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _directory_or_unlink(dir_fd: int, name: str) -> os.stat_result | None:
    """``name``'s stat if it is a directory; anything else (a link too, never followed) is
    unlinked, and ``None`` returned (also when it is gone already)."""
    info = _lstat(dir_fd, name)
    if info is not None and not stat.S_ISDIR(info.st_mode):
        os.unlink(name, dir_fd=dir_fd)
        return None
    return info


def _names(fd: int) -> list[str]:
    try:
        return os.listdir(fd)
    except (FileNotFoundError, NotADirectoryError):
        return []


def _open_dir(parent_fd: int, name: str, info: os.stat_result) -> int | None:
    """Open the directory ``name`` if it is still the one stat'ed (never a link swapped in)."""
    try:
        fd = _open_readable(parent_fd, name)
    except OSError:
        return None
    opened = os.fstat(fd)
    if (opened.st_dev, opened.st_ino) != (info.st_dev, info.st_ino):
        os.close(fd)
        return None
    return fd


def _open_readable(parent_fd: int | None, name: str) -> int:
    """Open a directory without following links (relative to ``parent_fd`` when given)."""
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
    except PermissionError:
        # only without root: the sandbox runs as the runner's own user and made a
        # directory unreadable (chmod 000); its owner may open it up again
        mode = os.stat(name, dir_fd=parent_fd, follow_symlinks=False).st_mode
        if not stat.S_ISDIR(mode):
            raise
        os.chmod(name, stat.S_IMODE(mode) | 0o700, dir_fd=parent_fd)
        return os.open(name, _DIR_FLAGS, dir_fd=parent_fd)


@contextlib.contextmanager
def _opened(fd: int) -> Iterator[int]:
    try:
        yield fd
    finally:
        os.close(fd)


@contextlib.contextmanager
def _parent(root_fd: int, parts: list[str]) -> Iterator[int]:
    """The directory holding a path's last component, opened one component at a time."""
    fds: list[int] = []
    try:
        fd = root_fd
        for part in parts:
            fd = os.open(part, _DIR_FLAGS, dir_fd=fd)
            fds.append(fd)
        yield fd
    finally:
        for opened in fds:
            os.close(opened)
