"""Files a configuration document refers to, checked and read safely: prompt files
(``system_prompt: {file: PATH}``), a task's ``workspace.files``, an eval's dataset and baseline.

The runner often runs as root, so a reference in YAML must not become a way to read the
host: a prompt file is a regular, singly-linked, UTF-8 text file of at most
:data:`MAX_PROMPT_BYTES`, inside the project (the root holding ``agents.d``/``tasks.d``;
for a YAML file given from elsewhere, that file's own directory).

The path is resolved once (so ``..`` and links are judged by where they really lead), then
opened beneath the boundary with the same no-follow primitive the file tools use, so a
link swapped in after the check is refused by the kernel. The file is opened with
``O_NONBLOCK`` and checked with ``fstat`` before any byte is read: a FIFO or a device
cannot hang or flood ``runner validate``.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import BinaryIO

from runner.config.documents import file_kind

MAX_PROMPT_BYTES = 256 * 1024
MAX_DATASET_BYTES = 256 << 20
"""An eval's labelled dataset (and its stored baseline) is at most this large."""
_MAX_PATH = 4096


class FileRefused(ValueError):
    """A referenced file is refused; the message says why and how to fix it."""


def workspace_file_problem(reference: str, root: Path) -> str | None:
    """Why a task's ``workspace.files`` entry (relative to the project root) would be refused
    by a run, or ``None``. A file that does not exist yet is not a problem here: it may be
    produced before the run, which checks again."""
    root = root.resolve()
    try:
        target = _resolve(reference, root, root, what="workspace files", base="the project root")
        info = os.lstat(target)
    except FileRefused as exc:
        return str(exc)
    except OSError:
        return None
    if not stat.S_ISREG(info.st_mode):
        return f"'{reference}' is {file_kind(info.st_mode)}, not a regular file; list data files only"
    return None


def boundary_for(yaml_file: Path, root: Path) -> Path:
    """The directory a YAML file's references must stay in: the project root when the file
    lives under it, else the file's own directory."""
    yaml_file, root = yaml_file.resolve(), root.resolve()
    return root if yaml_file.is_relative_to(root) else yaml_file.parent


def read_prompt_file(reference: str, yaml_file: Path, boundary: Path) -> str:
    """The text of ``reference`` (relative to ``yaml_file``), which must stay under ``boundary``."""
    target = _resolve(reference, yaml_file.parent, boundary)
    relative = target.relative_to(boundary)
    try:
        raw = _read_beneath(boundary, relative, reference)
    except OSError as exc:
        raise FileRefused(_os_message(exc, reference)) from None
    return _decode(raw, reference)


def _resolve(
    reference: str, base_dir: Path, boundary: Path, *, what: str = "prompt files", base: str = "this YAML file"
) -> Path:
    """Where ``reference`` (relative to ``base_dir``) really leads; refused unless under ``boundary``."""
    if "\0" in reference:
        raise FileRefused("the path contains a NUL byte; give the path of a text file")
    if len(reference) > _MAX_PATH:
        raise FileRefused(f"the path is longer than {_MAX_PATH} characters")
    written = base_dir / reference
    try:
        target = written.resolve(strict=False)
    except (OSError, RuntimeError):  # a symlink loop
        raise FileRefused(f"'{reference}' goes through a symbolic link loop; point at the file itself") from None
    if target == boundary:
        raise FileRefused(f"'{reference}' names the project directory, not a file; point at a file")
    if not target.is_relative_to(boundary):
        if Path(os.path.normpath(written)).is_relative_to(boundary):
            why = "goes through a symbolic link that leads outside the project"
        else:
            why = "is outside the project"
        raise FileRefused(
            f"'{reference}' {why}; {what} must be inside the project: "
            f"move the file there and give its path relative to {base}"
        )
    return target


def dataset_problem(reference: str, root: Path, *, what: str = "eval datasets", must_exist: bool = True) -> str | None:
    """Why the file ``reference`` (relative to the project root) may not be read as ``what``,
    or ``None``: it must stay inside the project (no ``..`` or link out), be a regular,
    singly-linked file of at most :data:`MAX_DATASET_BYTES`, and exist (when ``must_exist``)."""
    root = root.resolve()
    try:
        target = _resolve(reference, root, root, what=what, base="the project root")
        _check_plain(os.lstat(target), reference, limit=MAX_DATASET_BYTES, what=what)
    except FileRefused as exc:
        return str(exc)
    except FileNotFoundError:
        return f"no such file: {reference} (paths are relative to the project root)" if must_exist else None
    except OSError as exc:
        return _os_message(exc, reference)
    return None


def open_in_project(reference: str, root: Path, *, what: str = "eval datasets") -> BinaryIO:
    """``reference`` (relative to the project root) opened for reading without following a
    link out of the project, checked as :func:`dataset_problem` checks it (on what was
    opened, so a swap after the check is refused). :class:`FileRefused` otherwise."""
    root = root.resolve()
    target = _resolve(reference, root, root, what=what, base="the project root")
    try:
        fd = _open_beneath(root, target.relative_to(root), reference, limit=MAX_DATASET_BYTES, what=what)
    except OSError as exc:
        raise FileRefused(_os_message(exc, reference)) from None
    return os.fdopen(fd, "rb")


def _read_beneath(boundary: Path, relative: Path, reference: str) -> bytes:
    fd = _open_beneath(boundary, relative, reference, limit=MAX_PROMPT_BYTES, what="prompt files")
    with os.fdopen(fd, "rb") as handle:
        raw = handle.read(MAX_PROMPT_BYTES + 1)
    if len(raw) > MAX_PROMPT_BYTES:
        raise FileRefused(_too_big(reference, len(raw), MAX_PROMPT_BYTES, "prompt files"))
    return raw


def _open_beneath(boundary: Path, relative: Path, reference: str, *, limit: int, what: str) -> int:
    """A descriptor of ``boundary/relative``, opened beneath ``boundary`` without following links."""
    from runner.tools.paths import open_beneath  # the file tools' no-follow open (openat2 or a walk)

    _check_plain(os.lstat(boundary / relative), reference, limit=limit, what=what)  # before opening: opening a device may act
    root_fd = os.open(boundary, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fd = open_beneath(root_fd, str(relative), os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    finally:
        os.close(root_fd)
    try:
        _check_plain(os.fstat(fd), reference, limit=limit, what=what)  # what was opened, in case it was swapped
    except FileRefused:
        os.close(fd)
        raise
    return fd


def _check_plain(info: os.stat_result, reference: str, *, limit: int = MAX_PROMPT_BYTES, what: str = "prompt files") -> None:
    if not stat.S_ISREG(info.st_mode):
        kind = "a text file" if what == "prompt files" else "a regular file"
        raise FileRefused(f"'{reference}' is {file_kind(info.st_mode)}, not a regular file; point at {kind}")
    if info.st_nlink > 1:
        raise FileRefused(
            f"'{reference}' has {info.st_nlink} hard links; {what} must not be hard links (copy the file instead)"
        )
    if info.st_size > limit:
        raise FileRefused(_too_big(reference, info.st_size, limit, what))


def _too_big(reference: str, size: int, limit: int = MAX_PROMPT_BYTES, what: str = "prompt files") -> str:
    return f"'{reference}' is {size} bytes; {what} are limited to {limit} bytes"


def _decode(raw: bytes, reference: str) -> str:
    if b"\0" in raw:
        raise FileRefused(f"'{reference}' contains NUL bytes (a binary file?); a prompt file must be text")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise FileRefused(
            f"'{reference}' is not UTF-8 text (invalid byte at offset {exc.start}); save it as UTF-8"
        ) from None
    if not text.strip():
        raise FileRefused(f"'{reference}' is empty; write the prompt in it, or remove the reference")
    return text


def _os_message(exc: OSError, reference: str) -> str:
    code = exc.errno
    if code == errno.ENOENT:
        return f"'{reference}' does not exist; create it, or fix the path (relative to this YAML file)"
    if code in (errno.ELOOP, errno.EXDEV):
        return f"'{reference}' changed into a symbolic link while being read; prompt files must not be links"
    if code == errno.EISDIR:
        return f"'{reference}' is a directory, not a regular file; point at a text file"
    if code == errno.ENOTDIR:
        return f"'{reference}': a part of the path is not a directory"
    return f"cannot read '{reference}': {os.strerror(code or 0)}"
