"""Raw records from CSV, JSONL and Parquet files, streamed, with per-record problems.

Readers only split a file into records of raw values (column -> value); typing and ids
happen in :mod:`runner.batch.inputs`. Memory stays flat: CSV is read in chunks, Parquet by
record batches of the needed columns only, JSONL line by line.

- CSV: every cell is read as text exactly as written (``NA``, ``null`` and ``NaN`` stay
  text: a country code ``NA`` is not a missing value); an empty cell is empty, and so are
  the cells a short record lacks. A record with more fields than the header fails the
  file. A UTF-8 BOM is skipped; invalid UTF-8 makes that record invalid, naming the column.
- JSONL: one JSON object per line; blank lines are skipped. ``NaN``/``Infinity``,
  duplicate keys, invalid UTF-8 and non-objects make that line invalid, naming it.
- Parquet: values as Python objects (ints, floats, dates, ...); NaN counts as empty.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner import untrusted_json
from runner.errors import InputError, UsageError

FORMATS = ("csv", "jsonl", "parquet")
_SUFFIXES = {".csv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl", ".parquet": "parquet", ".pq": "parquet"}
_BOM = b"\xef\xbb\xbf"


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
        with path.open(encoding="utf-8-sig", errors="surrogateescape", newline="") as handle:
            header = next(csv.reader(handle), None)
        if not header:
            raise InputError(f"{path}: the CSV file is empty (no header row)")
        _check_header(path, header)
        return header
    if fmt == "parquet":
        import pyarrow.parquet as pq

        try:
            with pq.ParquetFile(path) as parquet:
                return list(parquet.schema_arrow.names)
        except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
            raise InputError(f"{path}: not a readable Parquet file: {exc}") from None
    return None


def read_records(path: Path, fmt: str, columns: Collection[str], *, chunk_rows: int = 2000) -> Iterator[RawRecord]:
    """Stream the records of ``path``, keeping only ``columns`` of each."""
    _check_readable(path)
    readers = {"csv": _csv_records, "jsonl": _jsonl_records, "parquet": _parquet_records}
    yield from readers[fmt](path, list(columns), chunk_rows)


# --- CSV ----------------------------------------------------------------------------------


def _csv_records(path: Path, columns: list[str], chunk_rows: int) -> Iterator[RawRecord]:
    """CSV rows through the standard library's reader, one at a time.

    Not pandas: importing pandas (and pyarrow with it) costs about 100 MB of resident
    memory for the whole batch, and a row at a time needs nothing it offers. Blank lines
    are skipped; a line with more fields than the header fails the file (a shifted row
    must not be read as data); a short line gives empty cells.
    """
    del chunk_rows  # rows stream one at a time
    present = [c for c in file_columns(path, "csv") or () if c in columns]
    number = 0
    with path.open(encoding="utf-8-sig", errors="surrogateescape", newline="") as handle:
        reader = csv.reader(handle)
        header = next(reader, None) or []
        index = {name: i for i, name in enumerate(header)}
        try:
            for row in reader:
                if not row or (len(row) == 1 and not row[0].strip() and len(header) > 1):
                    continue
                if len(row) > len(header):
                    raise InputError(
                        f"{path}: malformed CSV after row {number}: line {reader.line_num} has {len(row)} fields, "
                        f"the header {len(header)}"
                    )
                number += 1
                yield _csv_record(number, {c: row[index[c]] if index[c] < len(row) else "" for c in present})
        except csv.Error as exc:
            raise InputError(f"{path}: malformed CSV after row {number}: {exc}") from None


def _csv_record(number: int, values: dict[str, Any]) -> RawRecord:
    bad = [c for c, v in values.items() if isinstance(v, str) and _has_surrogates(v)]
    if bad:
        listed = ", ".join(f"'{c}'" for c in bad)
        return RawRecord(number, None, f"invalid UTF-8 in column {listed}")
    return RawRecord(number, values)


def _check_header(path: Path, header: list[str]) -> None:
    seen: set[str] = set()
    for name in header:
        if name in seen:
            raise InputError(f"{path}: the CSV header names column '{name}' twice")
        seen.add(name)


# --- JSONL --------------------------------------------------------------------------------


def _jsonl_records(path: Path, columns: list[str], chunk_rows: int) -> Iterator[RawRecord]:
    wanted = set(columns)
    number = 0
    with path.open("rb") as handle:
        for line_number, line in enumerate(handle, start=1):
            if line_number == 1 and line.startswith(_BOM):
                line = line[len(_BOM) :]
            if not line.strip():
                continue
            number += 1
            values, error = _parse_json_line(line)
            kept = {k: v for k, v in values.items() if k in wanted} if values is not None else None
            yield RawRecord(number, kept, error, line=line_number)


def _parse_json_line(line: bytes) -> tuple[dict[str, Any] | None, str | None]:
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, f"invalid UTF-8 at byte {exc.start} of the line"
    try:
        value = untrusted_json.loads(text, parse_constant=_reject_constant, object_pairs_hook=_reject_duplicate_keys)
    except (_JsonProblem, untrusted_json.JsonTooDeep) as exc:
        return None, str(exc)
    except json.JSONDecodeError as exc:
        return None, f"invalid JSON: {exc.msg} at column {exc.colno}"
    if not isinstance(value, dict):
        return None, f"expected a JSON object, got {type(value).__name__}"
    return value, None


class _JsonProblem(ValueError):
    pass


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
    import pyarrow.parquet as pq

    with pq.ParquetFile(path) as parquet:
        present = [c for c in columns if c in parquet.schema_arrow.names]
        number = 0
        # With no wanted column, read one anyway so the row count is right.
        selected = present or parquet.schema_arrow.names[:1]
        for batch in parquet.iter_batches(batch_size=chunk_rows, columns=selected):
            for values in batch.to_pylist():
                number += 1
                yield RawRecord(number, {c: values[c] for c in present})


# --- shared -------------------------------------------------------------------------------


def _check_readable(path: Path) -> None:
    if not path.is_file():
        raise InputError(f"{path}: no such input file")


def _has_surrogates(text: str) -> bool:
    """Whether decoding with ``surrogateescape`` met invalid UTF-8 bytes."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False
