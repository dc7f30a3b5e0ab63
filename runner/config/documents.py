"""Configuration sources without parsing: documents with the position of every node, and
reading a configuration file safely.

Kept apart from :mod:`runner.config.yamlload` (which needs PyYAML) so that code that only
holds or builds documents (the specs, the compiled project cache) does not import a parser.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner.errors import Problem

MAX_CONFIG_BYTES = 1024 * 1024


@dataclass(frozen=True)
class Position:
    """1-based line and column."""

    line: int
    column: int


@dataclass
class SourceMap:
    """Positions of values and keys in one document, by JSON pointer."""

    file: str
    values: dict[str, Position] = field(default_factory=dict)
    keys: dict[str, Position] = field(default_factory=dict)
    yaml11: dict[str, Any] = field(default_factory=dict)
    """Plain scalars YAML 1.1 read otherwise, by pointer (:class:`~runner.config.yamlcore.Yaml11Difference`)."""

    def locate(self, pointer: str, *, key: bool = False) -> Position:
        """The position of ``pointer``; falls back to the nearest enclosing node."""
        table = self.keys if key else self.values
        probe = pointer
        while True:
            if probe in table:
                return table[probe]
            if probe in self.values:
                return self.values[probe]
            if not probe:
                return Position(1, 1)
            probe = probe.rsplit("/", 1)[0]


@dataclass
class Document:
    """One parsed YAML document: its data and where each part was written."""

    path: Path
    data: Any
    source: SourceMap

    def problem(self, pointer: str, message: str, *, key: bool = False) -> Problem:
        pos = self.source.locate(pointer, key=key)
        return Problem(self.source.file, pos.line, pos.column, pointer, message)


class YamlError(Exception):
    """A YAML document could not be loaded. Carries a located ``Problem``."""

    def __init__(self, problem: Problem):
        self.problem = problem
        super().__init__(problem.render())


def escape_pointer_token(token: str | int) -> str:
    return str(token).replace("~", "~0").replace("/", "~1")


def read_config_bytes(path: Path, name: str) -> bytes:
    """The bytes of a configuration file: a regular file of at most ``MAX_CONFIG_BYTES``.

    Opened with ``O_NONBLOCK`` and checked with ``fstat`` before reading, so a FIFO or a
    device cannot block or flood the loader. ``OSError`` when it cannot be opened.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise YamlError(Problem(name, 1, 1, "", f"not a regular file ({file_kind(info.st_mode)}); "
                                    "configuration must be plain YAML files"))
        if info.st_size > MAX_CONFIG_BYTES:
            raise YamlError(_too_big(name, info.st_size))
        raw = handle.read(MAX_CONFIG_BYTES + 1)
    if len(raw) > MAX_CONFIG_BYTES:  # it grew while we looked
        raise YamlError(_too_big(name, len(raw)))
    return raw


def file_kind(mode: int) -> str:
    """A word for what a non-regular file is (for messages)."""
    kinds = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
             (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symbolic link"))
    return next((word for test, word in kinds if test(mode)), "not a regular file")


def _too_big(name: str, size: int) -> Problem:
    return Problem(name, 1, 1, "", f"file is {size} bytes; configuration files are limited to {MAX_CONFIG_BYTES} bytes")
