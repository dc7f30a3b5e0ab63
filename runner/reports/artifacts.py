"""Copying artifacts out of a run workspace, which an agent controlled, without trusting it.

A path is read only if it stays inside the workspace, names a regular file with a single
link, has an allowed suffix and is at most :data:`MAX_ARTIFACT_BYTES`. Every component is
opened relative to its parent directory with ``O_NOFOLLOW``, so no symbolic link is followed
anywhere in the path, and the checks apply to the very file that is read (no race between
checking and opening).
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from runner.files import write_atomic

MAX_ARTIFACT_BYTES = 20 * 1024 * 1024
MAX_TOTAL_BYTES = 100 * 1024 * 1024
MEDIA_TYPES = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".svg": "image/svg+xml",
    ".csv": "text/csv",
    ".json": "application/json",
    ".md": "text/markdown",
    ".txt": "text/plain",
}
_SIGNATURES = {"image/png": b"\x89PNG\r\n\x1a\n", "image/jpeg": b"\xff\xd8\xff"}
_ERRNO_REASONS = {
    errno.ELOOP: "is a symbolic link",
    errno.ENOENT: "does not exist",
    errno.ENOTDIR: "goes through something that is not a directory (or is a symbolic link)",
    errno.EACCES: "is not readable",
}


class ArtifactRefused(ValueError):
    """An artifact that will not be copied, with the reason."""

    def __init__(self, path: str, reason: str):
        self.path = path
        self.reason = reason
        super().__init__(f"artifact {path!r} {reason}")


@dataclass(frozen=True)
class CopiedArtifact:
    """An artifact now in the report directory at ``report_path`` (relative to it)."""

    source_path: str
    report_path: str
    media_type: str
    step: str | None
    caption: str | None
    content: bytes

    def as_record(self) -> dict[str, Any]:
        """The report.json ``artifacts`` entry."""
        entry = {"path": self.report_path, "media_type": self.media_type, "step": self.step}
        if self.caption:
            entry["caption"] = self.caption
        sha256 = hashlib.sha256(self.content).hexdigest()
        return {**entry, "source_path": self.source_path, "bytes": len(self.content), "sha256": sha256}


def media_type_of(relative: str) -> str:
    """The media type of an allowed artifact path; :class:`ArtifactRefused` otherwise."""
    suffix = PurePosixPath(relative).suffix.lower()
    if suffix not in MEDIA_TYPES:
        allowed = ", ".join(sorted(MEDIA_TYPES))
        raise ArtifactRefused(relative, f"has a suffix that is not allowed ({suffix or 'none'}; allowed: {allowed})")
    return MEDIA_TYPES[suffix]


def read_artifact(workspace: Path, relative: str, *, max_bytes: int = MAX_ARTIFACT_BYTES) -> bytes:
    """The bytes of the regular file ``relative`` inside ``workspace``, following no symlinks.

    Raises :class:`ArtifactRefused` for absolute paths, ``..``, symbolic links anywhere in
    the path, hard-linked files, non-regular files, disallowed suffixes and files larger
    than ``max_bytes``.
    """
    parts = _safe_parts(relative)
    media_type = media_type_of(relative)
    directory = os.open(workspace, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts[:-1]:
            inner = _open(relative, part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, directory)
            os.close(directory)
            directory = inner
        descriptor = _open(relative, parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, directory)
    finally:
        os.close(directory)
    with os.fdopen(descriptor, "rb") as stream:
        _check_file(relative, os.fstat(stream.fileno()), max_bytes)
        content = stream.read(max_bytes + 1)
    if len(content) > max_bytes:
        raise ArtifactRefused(relative, f"is larger than {max_bytes:,} bytes")
    signature = _SIGNATURES.get(media_type)
    if signature and not content.startswith(signature):
        raise ArtifactRefused(relative, f"is not a {media_type} file (wrong signature)")
    return content


def copy_artifacts(
    artifacts: Iterable[Mapping[str, Any]], workspace: Path | None, report_dir: Path
) -> tuple[list[CopiedArtifact], list[dict[str, str]]]:
    """Copy each record artifact from ``workspace`` to ``report_dir/artifacts/``.

    Returns the copies and the refusals (``{"path", "reason"}``); a refused artifact never
    stops the others. Copies stop once :data:`MAX_TOTAL_BYTES` would be exceeded.
    """
    copied: list[CopiedArtifact] = []
    problems: list[dict[str, str]] = []
    seen: set[str] = set()
    total = 0
    for artifact in artifacts:
        path = artifact["path"]
        try:
            if workspace is None:
                raise ArtifactRefused(path, "cannot be copied: the run has no workspace")
            if path in seen:
                raise ArtifactRefused(path, "is listed twice")
            seen.add(path)
            content = read_artifact(workspace, path, max_bytes=min(MAX_ARTIFACT_BYTES, MAX_TOTAL_BYTES - total))
        except ArtifactRefused as refused:
            problems.append({"path": path, "reason": refused.reason})
            continue
        total += len(content)
        report_path = f"artifacts/{path}"
        write_atomic(report_dir / report_path, content)
        copied.append(
            CopiedArtifact(
                path, report_path, media_type_of(path), artifact.get("step"), artifact.get("caption"), content
            )
        )
    return copied, problems


def _safe_parts(relative: str) -> list[str]:
    path = PurePosixPath(relative)
    if not relative or path.is_absolute() or "\\" in relative or "\x00" in relative:
        raise ArtifactRefused(relative, "is not a relative path inside the workspace")
    parts = relative.split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise ArtifactRefused(relative, "has empty, '.' or '..' segments (it must stay inside the workspace)")
    return parts


def _open(relative: str, name: str, flags: int, directory: int) -> int:
    try:
        return os.open(name, flags, dir_fd=directory)
    except OSError as error:
        reason = _ERRNO_REASONS.get(error.errno or 0, f"cannot be opened ({error.strerror})")
        raise ArtifactRefused(relative, reason) from None


def _check_file(relative: str, status: os.stat_result, max_bytes: int) -> None:
    if not stat.S_ISREG(status.st_mode):
        raise ArtifactRefused(relative, "is not a regular file")
    if status.st_nlink > 1:
        raise ArtifactRefused(relative, f"has {status.st_nlink} hard links (only files with one link are copied)")
    if status.st_size > max_bytes:
        raise ArtifactRefused(relative, f"is larger than {max_bytes:,} bytes ({status.st_size:,} bytes)")
