"""Which files a knowledge base reads: its globs and folders, confined to the project.

A source is a glob (``docs/**/*.md``) or a path (a folder means every supported file under
it, recursively). Sources are relative to the project root; absolute paths, ``..`` and
anything that resolves outside the root (a symbolic link out) are refused, as are files
that are not regular files. Hidden files and folders (``.git``, ``.runner``) are skipped.
"""

from __future__ import annotations

import glob
from collections.abc import Iterable
from pathlib import Path, PurePosixPath

from runner.errors import ConfigError
from runner.knowledge.convert import SUPPORTED_SUFFIXES

MAX_FILES = 10_000


def source_problem(pattern: str) -> str | None:
    """Why ``pattern`` is not an acceptable source, or ``None``."""
    if not pattern.strip() or "\0" in pattern:
        return "an empty source"
    path = PurePosixPath(pattern.replace("\\", "/"))
    if path.is_absolute() or pattern.startswith("~"):
        return f"'{pattern}' is absolute; give a path relative to the project root"
    if ".." in path.parts:
        return f"'{pattern}' leaves the project ('..'); keep sources inside the project"
    return None


def source_files(patterns: Iterable[str], root: Path) -> list[tuple[str, Path]]:
    """``(project-relative POSIX path, path)`` of every supported file the sources name, sorted."""
    root = root.resolve()
    found: dict[str, Path] = {}
    for pattern in patterns:
        problem = source_problem(pattern)
        if problem:
            raise ConfigError(f"knowledge source {problem}")
        for path in _expand(pattern, root):
            relative = _inside(path, root)
            if relative is not None and path.suffix.lower() in SUPPORTED_SUFFIXES and not _hidden(relative):
                found[relative] = path
        if len(found) > MAX_FILES:
            raise ConfigError(f"knowledge sources match more than {MAX_FILES} files; narrow '{pattern}'")
    return sorted(found.items())


def _expand(pattern: str, root: Path) -> list[Path]:
    if glob.has_magic(pattern):
        return [root / match for match in glob.glob(pattern, root_dir=root, recursive=True)]
    path = root / pattern
    if path.is_dir() and not path.is_symlink():
        return [p for p in path.rglob("*")]
    return [path] if path.exists() or path.is_symlink() else []


def _inside(path: Path, root: Path) -> str | None:
    """The project-relative path of a regular file inside ``root`` (links refused)."""
    if path.is_symlink() or not path.is_file():
        return None
    resolved = path.resolve()
    if not resolved.is_relative_to(root) or resolved.stat().st_nlink > 1:
        return None
    return resolved.relative_to(root).as_posix()


def _hidden(relative: str) -> bool:
    return any(part.startswith(".") for part in relative.split("/"))
