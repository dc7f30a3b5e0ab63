"""Raw records from CSV, JSONL and Parquet files, streamed, with per-record problems.

Readers only split a file into records of raw values (column -> value); typing and ids
happen in :mod:`runner.batch.inputs`. Memory stays flat: CSV is read in chunks, Parquet by
record batches of the needed columns only, JSONL line by line.

- CSV: every cell is read as text exactly as written (``NA``, ``null`` and ``NaN`` stay
  text: a country code ``NA`` is not a missing value); an empty cell is empty. A record with
  more or fewer fields than the header, a malformed quote, a NUL byte or invalid UTF-8 makes
  that record invalid and reading goes on (:mod:`runner.batch.csvfile`). A UTF-8 BOM is skipped.
- JSONL: one JSON object per line; blank lines are skipped. ``NaN``/``Infinity``,
  duplicate keys, invalid UTF-8 and non-objects make that line invalid, naming it.
- Parquet: values as Python objects (ints, floats, dates, ...); NaN counts as empty.
"""

from __future__ import annotations

import json
import math
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from runner import untrusted_json
from runner.batch.csvfile import csv_header, csv_rows, value_problem
from runner.errors import InputError, UsageError

FORMATS = ("csv", "jsonl", "parquet")
_SUFFIXES = {".csv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl", ".parquet": "parquet", ".pq": "parquet"}
_BOM = b"\xef\xbb\xbf"
MAX_LINE_BYTES = 8 << 20
"""A JSONL line longer than this is an error for its row (and is never held in memory whole)."""


@dataclass(frozen=True)
class RawRecord:
    """One record as read: its 1-based position, values by column, or why it is unreadable."""

    number: int
    values: dict[str, Any] | None
    error: str | None = None
    line: int | None = None  # JSONL line number (1-based)

    def where(self, file_name: str) -> str:
        """``tickets.csv row 12`` or ``tickets.jsonl row 12 (line 14)``."""
        line = f" (line {self.line})" if self.line is not None and self.line != self.number else ""
        return f"{file_name} row {self.number}{line}"


def detect_format(path: Path, explicit: str | None = None) -> str:
    """``csv``, ``jsonl`` or ``parquet``: ``explicit`` if given, else from the file suffix."""
    if explicit is not None:
        if explicit not in FORMATS:
            raise UsageError(f"unknown input format '{explicit}'; use one of: {', '.join(FORMATS)}")
        return explicit
    fmt = _SUFFIXES.get(path.suffix.lower())
    if fmt is None:
        raise UsageError(
            f"{path}: cannot tell the format from the suffix '{path.suffix}'; "
            f"name it .csv, .jsonl or .parquet, or pass --format {'|'.join(FORMATS)}"
        )
    return fmt


def file_columns(path: Path, fmt: str) -> list[str] | None:
    """The columns a CSV header or Parquet schema declares; ``None`` for JSONL (per line)."""
    _check_readable(path)
    if fmt == "csv":
        return csv_header(path)
    if fmt == "parquet":
        import pyarrow.parquet as pq

        try:
            with pq.ParquetFile(path) as parquet:
                return list(parquet.schema_arrow.names)
        except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
            raise InputError(f"{path}: not a readable Parquet file: {exc}") from None
    return None


def read_records(path: Path, fmt: str, columns: Collection[str] | None, *, chunk_rows: int = 2000) -> Iterator[RawRecord]:
    """Stream the records of ``path``, keeping only ``columns`` of each (``None``: every column)."""
    _check_readable(path)
    if fmt == "jsonl":
        yield from _jsonl_records(path, None if columns is None else list(columns), chunk_rows)
        return
    readers = {"csv": _csv_records, "parquet": _parquet_records}
    yield from readers[fmt](path, list(file_columns(path, fmt) or []) if columns is None else list(columns), chunk_rows)


# --- CSV ----------------------------------------------------------------------------------


def _csv_records(path: Path, columns: list[str], chunk_rows: int) -> Iterator[RawRecord]:
    """CSV rows through the standard library's reader, one at a time (see :mod:`runner.batch.csvfile`).

    Not pandas: importing pandas (and pyarrow with it) costs about 100 MB of resident
    memory for the whole batch, and a row at a time needs nothing it offers.
    """
    del chunk_rows  # rows stream one at a time
    header = csv_header(path)
    index = {name: i for i, name in enumerate(header)}
    present = [c for c in header if c in columns]
    for number, (_, fields, problem) in enumerate(csv_rows(path), start=1):
        if fields is None:
            yield RawRecord(number, None, problem)
            continue
        values = {c: fields[index[c]] for c in present}
        problem = value_problem(values)
        yield RawRecord(number, None, problem) if problem else RawRecord(number, values)


# --- JSONL --------------------------------------------------------------------------------


def _jsonl_records(path: Path, columns: list[str] | None, chunk_rows: int) -> Iterator[RawRecord]:
    wanted = None if columns is None else set(columns)
    number = 0
    with path.open("rb") as handle:
        for line_number, line in enumerate(_byte_lines(handle), start=1):
            if line_number == 1:
                line = _first_jsonl_line(line, path)
            if line is not None and not line.strip():
                continue
            number += 1
            values, error = _parse_json_line(line) if line is not None else (None, _too_long(line_number))
            kept = {k: v for k, v in values.items() if wanted is None or k in wanted} if values is not None else None
            yield RawRecord(number, kept, error, line=line_number)


def _byte_lines(handle: BinaryIO) -> Iterator[bytes | None]:
    """Lines of a binary file; ``None`` for a line longer than :data:`MAX_LINE_BYTES` (never held whole)."""
    while line := handle.readline(MAX_LINE_BYTES):
        if len(line) == MAX_LINE_BYTES and not line.endswith(b"\n"):
            while (rest := handle.readline(MAX_LINE_BYTES)) and not rest.endswith(b"\n"):
                pass
            yield None
        else:
            yield line


def _first_jsonl_line(line: bytes | None, path: Path) -> bytes | None:
    """The first line without its BOM; a binary or UTF-16 file is refused as a whole."""
    if line is None:
        return None
    if line.startswith(_BOM):
        return line[len(_BOM) :]
    if b"\x00" in line or line.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise InputError(
            f"{path}: not a UTF-8 JSON Lines text file (NUL bytes on line 1: a binary file, or text saved "
            "as UTF-16?); save it as UTF-8, one JSON object per line"
        )
    return line


def _too_long(line_number: int) -> str:
    return f"line {line_number} is longer than {MAX_LINE_BYTES >> 20} MiB"


def _parse_json_line(line: bytes) -> tuple[dict[str, Any] | None, str | None]:
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, f"invalid UTF-8 at byte {exc.start} of the line"
    try:
        value = untrusted_json.loads(
            text, parse_constant=_reject_constant, parse_float=_finite_float, object_pairs_hook=_reject_duplicate_keys
        )
    except (_JsonProblem, untrusted_json.JsonTooDeep) as exc:
        return None, str(exc)
    except json.JSONDecodeError as exc:
        return None, f"invalid JSON: {exc.msg} at column {exc.colno}"
    except ValueError as exc:  # an integer beyond Python's digit limit
        return None, f"invalid JSON value: {exc}"
    except RecursionError:
        return None, "invalid JSON: nested too deeply"
    if not isinstance(value, dict):
        return None, f"expected a JSON object, got {type(value).__name__}"
    return value, None


class _JsonProblem(ValueError):
    pass


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _JsonProblem(f"{text} is out of range for a number")
    return value


def _reject_constant(name: str) -> Any:
    raise _JsonProblem(f"{name} is not valid JSON (use null for a missing number)")


def _reject_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _JsonProblem(f"duplicate key '{key}' in a JSON object")
        out[key] = value
    return out


# --- Parquet ------------------------------------------------------------------------------


def _parquet_records(path: Path, columns: list[str], chunk_rows: int) -> Iterator[RawRecord]:
    """Rows by record batch, row group by row group: a row group that cannot be read makes each of
    its rows an error (the metadata says how many), a value Python cannot hold (a timestamp out
    of range, text that is not UTF-8) makes its row an error, and reading goes on."""
    import pyarrow.parquet as pq

    with pq.ParquetFile(path) as parquet:
        present = [c for c in columns if c in parquet.schema_arrow.names]
        # With no wanted column, read one anyway so the row count is right.
        selected = present or parquet.schema_arrow.names[:1]
        number = 0
        for group in range(parquet.num_row_groups):
            size, done = parquet.metadata.row_group(group).num_rows, 0
            try:
                for batch in parquet.iter_batches(batch_size=chunk_rows, row_groups=[group], columns=selected):
                    for values, error in _batch_rows(batch, present):
                        number, done = number + 1, done + 1
                        yield RawRecord(number, values, error)
            except _ARROW_READ_ERRORS as exc:
                for _ in range(size - done):
                    number += 1
                    yield RawRecord(number, None, f"unreadable Parquet data (row group {group}): {exc}")


_ARROW_READ_ERRORS = (OSError, ValueError, ArithmeticError, NotImplementedError)
"""What pyarrow raises for corrupt or unconvertible data (its ArrowInvalid is a ValueError,
ArrowIOError an OSError, ArrowNotImplementedError a NotImplementedError)."""


def _batch_rows(batch: Any, present: list[str]) -> Iterator[tuple[dict[str, Any] | None, str | None]]:
    try:
        rows = batch.to_pylist()
    except _ARROW_READ_ERRORS:
        rows = None
    if rows is not None:
        for values in rows:
            yield {c: values[c] for c in present}, None
        return
    for index in range(batch.num_rows):  # some value cannot become a Python object: find which
        values, bad = {}, []
        for column in present:
            try:
                values[column] = batch.column(column)[index].as_py()
            except _ARROW_READ_ERRORS as exc:
                bad.append(f"column '{column}': {exc}")
        yield (None, f"unreadable value in {'; '.join(bad)}") if bad else (values, None)


# --- shared -------------------------------------------------------------------------------


def _check_readable(path: Path) -> None:
    check_input_file(path)


def check_input_file(path: Path) -> None:
    """:class:`InputError` unless ``path`` is a regular file (a FIFO or device would block or never end)."""
    if not path.exists():
        raise InputError(f"{path}: no such input file")
    if not path.is_file():
        raise InputError(f"{path}: not a regular file (a directory, FIFO or device); give a CSV, JSONL or Parquet file")
