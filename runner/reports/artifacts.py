"""Copying artifacts out of a run workspace, which an agent controlled, without trusting it.

A path is read only if it stays inside the workspace, names a regular file with a single
link and is at most :data:`MAX_ARTIFACT_BYTES`. The file is opened with the file tools'
primitive (:func:`runner.tools.paths.open_beneath`: ``openat2`` with ``RESOLVE_BENEATH |
RESOLVE_NO_SYMLINKS``), so no symbolic link is followed anywhere in the path, and the
checks apply to the very file that is read (no race between checking and opening).

Any file a tool may write can be reported: its media type comes from its suffix (unknown
ones are ``application/octet-stream``). Before a copy is written, known secrets are
redacted from text and a binary file holding one is withheld (:mod:`runner.reports.screen`).
"""

from __future__ import annotations

import errno
import hashlib
import mimetypes
import os
import re
import stat
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from runner.files import write_atomic
from runner.redact import redact_secrets
from runner.tools.paths import WorkspacePathError, open_beneath, reportable_path

MAX_ARTIFACT_BYTES = 20 * 1024 * 1024
MAX_TOTAL_BYTES = 100 * 1024 * 1024
OCTET_STREAM = "application/octet-stream"
MEDIA_TYPES = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".gif": "image/gif",
    ".webp": "image/webp",
    ".svg": "image/svg+xml",
    ".csv": "text/csv",
    ".tsv": "text/tab-separated-values",
    ".json": "application/json",
    ".jsonl": "application/jsonl",
    ".md": "text/markdown",
    ".txt": "text/plain",
    ".log": "text/plain",
    ".py": "text/x-python",
    ".sh": "text/x-shellscript",
    ".html": "text/html",
    ".htm": "text/html",
    ".xml": "application/xml",
    ".yaml": "application/yaml",
    ".yml": "application/yaml",
    ".pdf": "application/pdf",
    ".xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
    ".docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    ".parquet": "application/vnd.apache.parquet",
    ".zip": "application/zip",
    ".gz": "application/gzip",
}
"""Media types by suffix; other suffixes ask :mod:`mimetypes`, then fall back to octet-stream."""
MEDIA_TYPE = re.compile(r"^[a-z]+/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}$")
"""RFC 6838 shape (also in report.schema.json#/$defs/media_type)."""
_SIGNATURES = {
    "image/png": (b"\x89PNG\r\n\x1a\n",),
    "image/jpeg": (b"\xff\xd8\xff",),
    "image/gif": (b"GIF87a", b"GIF89a"),
}
_ERRNO_REASONS = {
    errno.EXDEV: "leads outside the workspace",
    errno.ENOENT: "does not exist",
    errno.ENOTDIR: "goes through something that is not a directory",
    errno.EACCES: "is not readable",
    errno.ENAMETOOLONG: "has a name that is too long",
}
_LONG_REPORT_PATH = 1024  # bytes of report-relative path beyond which the copy gets a short name


class ArtifactRefused(ValueError):
    """An artifact that will not be copied, with the reason."""

    def __init__(self, path: str, reason: str):
        self.path = path
        self.reason = reason
        super().__init__(f"artifact {path!r} {reason}")


@dataclass(frozen=True)
class CopiedArtifact:
    """An artifact now in the report directory at ``report_path`` (relative to it).

    ``content`` is what was written: text with secrets replaced (``redactions`` of them).
    """

    source_path: str
    report_path: str
    media_type: str
    step: str | None
    caption: str | None
    content: bytes
    redactions: int = 0

    def as_record(self) -> dict[str, Any]:
        """The report.json ``artifacts`` entry."""
        entry: dict[str, Any] = {"path": self.report_path, "media_type": self.media_type, "step": self.step}
        if self.caption:
            entry["caption"] = self.caption
        if self.redactions:
            entry["redactions"] = self.redactions
        sha256 = hashlib.sha256(self.content).hexdigest()
        return {**entry, "source_path": self.source_path, "bytes": len(self.content), "sha256": sha256}


def media_type_of(relative: str) -> str:
    """The media type a report gives the file ``relative``; never fails."""
    suffix = PurePosixPath(relative).suffix.lower()
    if suffix in MEDIA_TYPES:
        return MEDIA_TYPES[suffix]
    guessed = mimetypes.guess_type(f"file{suffix}", strict=False)[0] if suffix else None
    return guessed if guessed and MEDIA_TYPE.match(guessed) else OCTET_STREAM


def read_artifact(workspace: Path, relative: str, *, max_bytes: int = MAX_ARTIFACT_BYTES) -> bytes:
    """The bytes of the regular file ``relative`` inside ``workspace``, following no symlinks.

    Raises :class:`ArtifactRefused` for absolute paths, ``..``, symbolic links anywhere in
    the path, hard-linked files, non-regular files, files larger than ``max_bytes`` and
    images whose content does not match their suffix.
    """
    _check_path(relative)
    fd = _open(workspace, relative)
    try:
        _check_file(relative, os.fstat(fd), max_bytes)  # the very file opened, before any read
    except ArtifactRefused:
        os.close(fd)
        raise
    os.set_blocking(fd, True)
    with os.fdopen(fd, "rb") as stream:
        content = stream.read(max_bytes + 1)
    if len(content) > max_bytes:
        raise ArtifactRefused(relative, f"is larger than {max_bytes:,} bytes")
    media_type = media_type_of(relative)
    signatures = _SIGNATURES.get(media_type)
    if signatures and not content.startswith(signatures):
        raise ArtifactRefused(relative, f"is not a {media_type} file (wrong signature)")
    return content


def copy_artifacts(
    artifacts: Iterable[Mapping[str, Any]], workspace: Path | None, report_dir: Path, secrets: Sequence[str] = ()
) -> tuple[list[CopiedArtifact], list[dict[str, str]]]:
    """Copy each record artifact from ``workspace`` to ``report_dir/artifacts/``.

    Returns the copies and the refusals (``{"path", "reason"}``); a refused artifact never
    stops the others. A path listed again (two steps wrote the same file) is copied once.
    Copies stop once :data:`MAX_TOTAL_BYTES` would be exceeded. ``secrets`` are redacted
    from text copies; a binary file holding one is withheld.
    """
    copied: list[CopiedArtifact] = []
    problems: list[dict[str, str]] = []
    seen: set[str] = set()
    total = 0
    for artifact in artifacts:
        path = artifact["path"]
        if path in seen:
            continue
        seen.add(path)
        try:
            if workspace is None:
                raise ArtifactRefused(path, "cannot be copied: the run has no workspace")
            content = read_artifact(workspace, path, max_bytes=min(MAX_ARTIFACT_BYTES, MAX_TOTAL_BYTES - total))
            copy = _copy(artifact, content, report_dir, secrets)
        except ArtifactRefused as refused:
            problems.append({"path": path, "reason": refused.reason})
            continue
        total += len(content)
        copied.append(copy)
    return copied, problems


def report_path_of(relative: str, report_dir: Path) -> str:
    """Where the copy of ``relative`` goes, relative to ``report_dir``: ``artifacts/<path>``,
    or a short hashed name when the full path would be too long for the file system."""
    natural = f"artifacts/{relative}"
    too_long = len(os.fsencode(f"{report_dir}/{natural}")) > _LONG_REPORT_PATH
    if not too_long and all(len(os.fsencode(part)) <= 200 for part in relative.split("/")):
        return natural
    digest = hashlib.sha256(relative.encode("utf-8", "surrogateescape")).hexdigest()[:16]
    name = PurePosixPath(relative)
    suffix = name.suffix if len(name.suffix) <= 16 else ""
    return f"artifacts/_long/{digest}-{name.name.removesuffix(suffix)[:40]}{suffix}"


def _copy(artifact: Mapping[str, Any], content: bytes, report_dir: Path, secrets: Sequence[str]) -> CopiedArtifact:
    from runner.reports.screen import SecretFound, screen_artifact  # a run with artifacts only

    path = artifact["path"]
    try:
        screened = screen_artifact(content, secrets)
    except SecretFound as found:  # its text may quote a zip member's name, which may hold the key
        reason = redact_secrets(str(found), secrets)
        raise ArtifactRefused(path, f"was withheld: {reason}; secrets are never copied into reports") from None
    report_path = report_path_of(path, report_dir)
    try:
        write_atomic(report_dir / report_path, screened.content)
    except OSError as error:
        raise ArtifactRefused(path, f"cannot be written into the report ({error.strerror or error})") from None
    return CopiedArtifact(
        path, report_path, media_type_of(path), artifact.get("step"), artifact.get("caption"),
        screened.content, screened.redactions,
    )  # fmt: skip


def _check_path(relative: str) -> None:
    if not isinstance(relative, str) or "\\" in relative:
        raise ArtifactRefused(str(relative), "is not a relative path inside the workspace")
    try:
        canonical = reportable_path(relative)
    except WorkspacePathError as refused:
        raise ArtifactRefused(relative, f"is not a relative path inside the workspace ({refused})") from None
    if canonical != relative:
        raise ArtifactRefused(relative, "has empty or '.' segments (give the path in canonical form)")


def _open(workspace: Path, relative: str) -> int:
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY
    try:
        root = os.open(workspace, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as error:
        raise ArtifactRefused(
            relative, f"cannot be copied: the workspace cannot be opened ({error.strerror})"
        ) from None
    try:
        return open_beneath(root, relative, flags)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise ArtifactRefused(relative, _which_link(root, relative)) from None
        reason = _ERRNO_REASONS.get(error.errno or 0, f"cannot be opened ({error.strerror})")
        raise ArtifactRefused(relative, reason) from None
    finally:
        os.close(root)


def _which_link(root: int, relative: str) -> str:
    """Say which component is the link; each prefix is examined with ``lstat`` only, and the
    walk stops at the first link, so nothing is followed."""
    parts = relative.split("/")
    for count in range(1, len(parts) + 1):
        prefix = "/".join(parts[:count])
        try:
            is_link = stat.S_ISLNK(os.stat(prefix, dir_fd=root, follow_symlinks=False).st_mode)
        except OSError:
            break
        if is_link:
            return "is a symbolic link" if count == len(parts) else f"goes through a symbolic link ({prefix!r})"
    return "is a symbolic link (or goes through one)"


def _check_file(relative: str, status: os.stat_result, max_bytes: int) -> None:
    if not stat.S_ISREG(status.st_mode):
        raise ArtifactRefused(relative, "is not a regular file")
    if status.st_nlink > 1:
        raise ArtifactRefused(relative, f"has {status.st_nlink} hard links (only files with one link are copied)")
    if status.st_size > max_bytes:
        raise ArtifactRefused(relative, f"is larger than {max_bytes:,} bytes ({status.st_size:,} bytes)")
