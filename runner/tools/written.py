"""Which files a tool call wrote, for the report.

``write_file`` and ``chart`` name their files themselves. Sandboxed code (``python``,
``shell``, custom shell tools) can write anything, so the registry lists the workspace
before and after such a call and reports the regular files that are new or changed.
The listing follows no link: directories are opened beneath the workspace with
:func:`runner.tools.paths.open_beneath`, and only ``lstat`` results are used. Hidden
entries (``.tables/``, ``.cache``) and ``__pycache__`` are not reported.

Every path a tool reports, either way, passes :func:`runner.tools.paths.reportable_path`;
paths that do not are left out with a note the model sees, so the run record is always
valid.
"""

from __future__ import annotations

import contextlib
import os
import stat
from dataclasses import dataclass, field, replace
from pathlib import Path

from runner.tools.base import ToolResult
from runner.tools.paths import MAX_PATH_DEPTH, WorkspacePathError, open_beneath, reportable_path

MAX_ENTRIES = 20_000
"""Entries listed per snapshot; a bigger workspace is listed in part (and the call says so)."""
MAX_REPORTED = 100
"""Files reported per call; more are named in a note instead."""
_SKIPPED_DIRECTORIES = frozenset({"__pycache__"})

FileState = tuple[int, int, int, int]  # inode, size, mtime_ns, ctime_ns


@dataclass
class Snapshot:
    """The regular files of a workspace, by path, with what changes when one is written."""

    files: dict[str, FileState] = field(default_factory=dict)
    complete: bool = True
    unreportable: set[str] = field(default_factory=set)  # repr() of names a report cannot show
    unreadable: set[str] = field(default_factory=set)  # repr() of directories that could not be listed
    too_deep: set[str] = field(default_factory=set)  # repr() of directories deeper than a report may name


def take_snapshot(root: Path, max_entries: int = MAX_ENTRIES) -> Snapshot:
    """List the regular files under ``root`` without following any link."""
    snapshot = Snapshot()
    root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        pending, seen = [""], 0
        while pending:
            directory = pending.pop()
            seen = _list_directory(root_fd, directory, snapshot, pending, seen, max_entries)
            if seen >= max_entries:
                snapshot.complete = False
                break
    finally:
        os.close(root_fd)
    return snapshot


def with_written_files(result: ToolResult, before: Snapshot, after: Snapshot) -> ToolResult:
    """``result`` with the files that are new or changed in ``after`` added to its artifacts."""
    written = sorted(path for path, state in after.files.items() if before.files.get(path) != state)
    artifacts = list(dict.fromkeys([*result.artifacts, *written]))
    notes = []
    if len(artifacts) > MAX_REPORTED:
        notes.append(f"{len(artifacts) - MAX_REPORTED} more written files are not reported as artifacts")
        artifacts = artifacts[:MAX_REPORTED]
    unreportable = sorted(after.unreportable - before.unreportable)
    if unreportable:
        shown = ", ".join(unreportable[:5]) + (", ..." if len(unreportable) > 5 else "")
        notes.append(f"names with control characters or bytes that are not UTF-8 are not reported: {shown}")
    too_deep = sorted(after.too_deep - before.too_deep)
    if too_deep:
        notes.append(f"paths nested more than {MAX_PATH_DEPTH} levels are not reported: {', '.join(too_deep[:5])}")
    if after.unreadable:
        notes.append(
            f"directories that could not be listed were not checked for new files: {', '.join(sorted(after.unreadable)[:5])}"
        )
    if not after.complete:
        notes.append(f"the workspace has more than {MAX_ENTRIES} entries; only part of it was checked for new files")
    return _with_notes(replace(result, artifacts=artifacts), notes)


def checked_artifacts(result: ToolResult) -> ToolResult:
    """``result`` with each artifact path in canonical form; unreportable ones are dropped
    (``..``, absolute, control characters, not UTF-8) with a note saying why."""
    kept: list[str] = []
    notes = []
    for path in result.artifacts:
        try:
            kept.append(reportable_path(str(path)))
        except WorkspacePathError as refused:
            notes.append(f"artifact not reported: {refused}")
    if kept == list(result.artifacts) and not notes:
        return result
    return _with_notes(replace(result, artifacts=list(dict.fromkeys(kept))), notes)


def _list_directory(root_fd: int, directory: str, snapshot: Snapshot, pending: list[str], seen: int, limit: int) -> int:
    try:
        fd = open_beneath(root_fd, directory, os.O_RDONLY | os.O_DIRECTORY) if directory else os.dup(root_fd)
    except OSError:
        return seen  # replaced by a link or removed since it was listed: not followed
    try:
        with os.scandir(fd) as scan:
            entries = sorted(scan, key=lambda e: e.name)
        for entry in entries:
            if seen >= limit:
                return seen
            seen += 1
            if entry.name.startswith(".") or entry.name in _SKIPPED_DIRECTORIES:
                continue
            path = f"{directory}/{entry.name}" if directory else entry.name
            with contextlib.suppress(OSError):  # removed since it was listed
                _add_entry(snapshot, pending, path, entry.stat(follow_symlinks=False))
    except OSError:
        snapshot.unreadable.add(repr(directory or "."))  # its owner made it unreadable
    finally:
        os.close(fd)
    return seen


def _add_entry(snapshot: Snapshot, pending: list[str], path: str, info: os.stat_result) -> None:
    if not (stat.S_ISDIR(info.st_mode) or stat.S_ISREG(info.st_mode)):
        return  # links, FIFOs, devices and sockets are never artifacts
    try:
        reportable_path(path)
    except WorkspacePathError:
        deep = path.count("/") >= MAX_PATH_DEPTH
        (snapshot.too_deep if deep else snapshot.unreportable).add(repr(path))
        return
    if stat.S_ISDIR(info.st_mode):
        pending.append(path)
    else:
        snapshot.files[path] = (info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


def _with_notes(result: ToolResult, notes: list[str]) -> ToolResult:
    if not notes:
        return result
    text = "\n".join(f"[note: {note}]" for note in notes)
    return replace(result, content=f"{result.content}\n{text}" if result.content else text)
