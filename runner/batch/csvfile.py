"""CSV records that survive a bad line: a malformed record is that row's error, and reading goes on.

The standard library's reader (``strict=True``) does the parsing; this module decides what a
bad record costs. A record with more or fewer fields than the header, a NUL byte, a line
longer than :data:`MAX_LINE_CHARS`, or a quoted field that never closes properly is one
invalid row (its row number, its line and what is wrong), and the next record is read.

An unterminated quote swallows the lines after it into one field. When the parser fails on
such a record (strict mode refuses a closing quote not followed by a delimiter, and the end
of the file inside quotes), the record's first line is the bad row and the lines it swallowed
are read again, each on its own, so the rows they hold are not lost. Each line is parsed at
most twice, so a hostile file costs linear time; memory is bounded by the line cap and by the
``csv`` module's field size limit.

Only a file unreadable as a whole is refused (:class:`~runner.errors.InputError`): empty, no
header row, a malformed header, or not UTF-8 text (NUL bytes or invalid UTF-8 in the header,
as in binary files and UTF-16 exports).
"""

from __future__ import annotations

import csv
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from runner.errors import InputError

MAX_LINE_CHARS = 8 << 20
"""A physical line longer than this is an error for its row (and is never held in memory whole)."""

Line = tuple[int, str]  # (1-based line number, text with its line ending)


class _LineTooLong(Exception):
    def __init__(self, number: int) -> None:
        super().__init__(f"line {number} is longer than {MAX_LINE_CHARS // (1 << 20)} MiB")


class _Lines:
    """The physical lines of an open text file, numbered; remembers those taken by the current record."""

    def __init__(self, handle: IO[str]) -> None:
        self._handle = handle
        self.number = 0
        self.taken: list[Line] = []

    def __iter__(self) -> _Lines:
        return self

    def __next__(self) -> str:
        text = self._handle.readline(MAX_LINE_CHARS)
        if not text:
            raise StopIteration
        self.number += 1
        if len(text) == MAX_LINE_CHARS and not text.endswith(("\n", "\r")):
            self._skip_rest_of_line()
            raise _LineTooLong(self.number)
        self.taken.append((self.number, text))
        return text

    def _skip_rest_of_line(self) -> None:
        while (chunk := self._handle.readline(MAX_LINE_CHARS)) and not chunk.endswith(("\n", "\r")):
            pass


def open_csv(path: Path) -> IO[str]:
    """The file as text: UTF-8 (a BOM skipped), invalid bytes kept as surrogates to report per row."""
    return path.open(encoding="utf-8-sig", errors="surrogateescape", newline="")


def csv_header(path: Path) -> list[str]:
    """The header row's column names; :class:`InputError` when the file is unreadable as a whole."""
    with open_csv(path) as handle:
        return _header(_Lines(handle), path)


def csv_rows(path: Path) -> Iterator[tuple[int, list[str] | None, str | None]]:
    """``(line, fields, None)`` for each well-formed data record, ``(line, None, problem)`` for a bad one.

    ``line`` is the record's first physical line. Blank lines are skipped.
    """
    with open_csv(path) as handle:
        lines = _Lines(handle)
        width = len(_header(lines, path))
        yield from _records(lines, width)


def _records(lines: _Lines, width: int) -> Iterator[tuple[int, list[str] | None, str | None]]:
    reader = csv.reader(lines, strict=True)
    again: deque[Line] = deque()  # lines a bad record swallowed, to be read once more, alone
    while True:
        if again:
            number, text = again.popleft()
            row, problem = _parse_alone(text, number)
            taken = [(number, text)]
        else:
            lines.taken = []
            try:
                row, problem = next(reader), None
            except StopIteration:
                return
            except (csv.Error, _LineTooLong) as exc:
                row, problem = None, _parse_problem(exc, lines.taken)
                again.extend(lines.taken[1:])
                reader = csv.reader(lines, strict=True)  # a fresh parser state after the error
            taken = lines.taken or [(lines.number, "")]
        if row is not None and _blank(row, width):
            continue
        first = taken[0][0]
        if row is not None and len(row) != width:
            problem = _width_problem(first, len(row), width)
        yield (first, None, problem) if problem else (first, row, None)


def _parse_alone(text: str, number: int) -> tuple[list[str] | None, str | None]:
    try:
        return next(csv.reader([text], strict=True), []), None
    except csv.Error as exc:
        return None, _parse_problem(exc, [(number, text)])


def _parse_problem(exc: Exception, taken: list[Line]) -> str:
    if isinstance(exc, _LineTooLong):
        return str(exc)
    start = taken[0][0] if taken else 0
    return (
        f"malformed quoting in the record starting on line {start} ({exc}); quote a value as a whole "
        'and double the quotes inside it ("say ""hi""")'
    )


def _width_problem(line: int, fields: int, width: int) -> str:
    if fields > width:
        hint = "a value containing a comma must be quoted"
    else:
        hint = "write an empty value between commas rather than leaving it out"
    return f"line {line} has {fields} fields, the header has {width} ({hint})"


def _blank(row: list[str], width: int) -> bool:
    return not row or (len(row) == 1 and not row[0].strip() and width > 1)


def _header(lines: _Lines, path: Path) -> list[str]:
    reader = csv.reader(lines, strict=True)
    try:
        header = next(reader, None)
    except (csv.Error, _LineTooLong) as exc:
        _refuse_binary(lines, path)
        raise InputError(f"{path}: the CSV header row is malformed: {exc}") from None
    _refuse_binary(lines, path)
    if not header:
        raise InputError(f"{path}: the CSV file is empty (no header row)")
    seen: set[str] = set()
    for name in header:
        if name in seen:
            raise InputError(f"{path}: the CSV header names column '{name}' twice")
        seen.add(name)
    return header


def _refuse_binary(lines: _Lines, path: Path) -> None:
    text = "".join(text for _, text in lines.taken)
    if "\x00" in text or _has_surrogates(text):
        raise InputError(
            f"{path}: not a UTF-8 CSV text file (the header row holds NUL bytes or invalid UTF-8: a binary "
            "file, or text saved as UTF-16 or Latin-1?); save it as UTF-8 CSV"
        )


def _has_surrogates(text: str) -> bool:
    """Whether decoding with ``surrogateescape`` met invalid UTF-8 bytes."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def value_problem(values: dict[str, Any]) -> str | None:
    """Why a record's raw text values cannot be used (invalid UTF-8, NUL bytes), naming the columns."""
    bad_utf8 = [c for c, v in values.items() if isinstance(v, str) and _has_surrogates(v)]
    if bad_utf8:
        return f"invalid UTF-8 in column {_listed(bad_utf8)}"
    nul = [c for c, v in values.items() if isinstance(v, str) and "\x00" in v]
    if nul:
        return f"a NUL byte in column {_listed(nul)}"
    return None


def _listed(columns: list[str]) -> str:
    return ", ".join(f"'{c}'" for c in columns)
