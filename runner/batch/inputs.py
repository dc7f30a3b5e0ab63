"""Batch input rows: mapped columns, a stable id, and typed inputs or a per-row error.

``read_rows`` streams an input file (see :mod:`runner.batch.readers`) and yields one
:class:`Row` per record, in file order. A row is either valid (``inputs`` holds the typed
task inputs) or invalid (``error`` says why, naming the row number, its id and the
column). Problems that affect every row (no such file, a required column absent from a
CSV header or Parquet schema, an unknown ``--map`` input) raise :class:`InputError` or
:class:`UsageError` before any row is read.

Row ids come from ``id_column`` or, without one, from a hash of the row's mapped raw
values (:func:`row_hash_id`). Raw values, not typed ones, are hashed so a default such as
``today`` cannot change a row's id between a run and its resume. A second row with an id
already seen is invalid (it is not allowed to overwrite the first).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner.batch.readers import RawRecord, check_input_file, detect_format, file_columns, read_records
from runner.config.coerce import coerce_inputs, describe, is_empty
from runner.config.specs import InputSpec
from runner.errors import InputError, UsageError


@dataclass(frozen=True)
class Row:
    """One input row: its 1-based position, its id, and typed inputs or why it is invalid."""

    number: int
    id: str | None
    inputs: dict[str, Any] | None
    error: str | None = None

    @property
    def valid(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class InputSource:
    """Where rows come from and how columns become inputs (recorded in the batch journal)."""

    path: Path
    format: str
    mapping: dict[str, str] = field(default_factory=dict)  # input name -> column
    id_column: str | None = None

    @classmethod
    def open(
        cls,
        path: str | Path,
        *,
        format: str | None = None,
        mapping: Mapping[str, str] | None = None,
        id_column: str | None = None,
    ) -> InputSource:
        """Check the path and format now, so a bad flag fails before anything runs."""
        path = Path(path)
        fmt = detect_format(path, format)
        check_input_file(path)
        return cls(path, fmt, dict(mapping or {}), id_column)

    def column_for(self, input_name: str) -> str:
        return self.mapping.get(input_name, input_name)

    def options(self) -> dict[str, Any]:
        """What must match for a journal to resume this source."""
        return {"format": self.format, "mapping": dict(sorted(self.mapping.items())), "id_column": self.id_column}


def parse_mapping(items: Iterable[str], specs: Iterable[InputSpec]) -> dict[str, str]:
    """``["name=column", ...]`` (``--map`` flags) as ``{input name: column}``."""
    known = {spec.name for spec in specs}
    mapping: dict[str, str] = {}
    for item in items:
        name, sep, column = item.partition("=")
        name, column = name.strip(), column.strip()
        if not sep or not name or not column:
            raise UsageError(f"--map {item!r}: expected INPUT=COLUMN")
        if name not in known:
            listed = ", ".join(sorted(known)) or "none"
            raise UsageError(f"--map {item!r}: the task has no input '{name}' (inputs: {listed})")
        if name in mapping:
            raise UsageError(f"--map: input '{name}' is mapped twice")
        mapping[name] = column
    return mapping


def read_rows(
    source: InputSource,
    specs: Iterable[InputSpec],
    *,
    chunk_rows: int = 2000,
    today: dt.date | None = None,
) -> Iterator[Row]:
    """Stream the rows of ``source`` as typed inputs for ``specs``, in file order."""
    specs = tuple(specs)
    wanted = {spec.name: source.column_for(spec.name) for spec in specs}
    _check_columns(source, specs, file_columns(source.path, source.format))
    columns = set(wanted.values()) | ({source.id_column} if source.id_column else set())
    first_seen: dict[str, int] = {}
    for record in read_records(source.path, source.format, columns, chunk_rows=chunk_rows):
        row = _row(record, source, specs, wanted, today)
        if row.id is not None:
            first = first_seen.setdefault(row.id, row.number)
            if first != row.number:
                row = Row(row.number, row.id, None, _duplicate_message(record, source, row.id, first))
        yield row


def row_hash_id(values: Mapping[str, Any]) -> str:
    """The first 16 hex digits of the SHA-256 of ``values`` as canonical JSON."""
    canonical = json.dumps(
        {k: None if is_empty(v) else v for k, v in values.items()},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        default=str,  # dates and decimals from Parquet
    )
    return hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def file_sha256(path: Path) -> str:
    """SHA-256 of a file's bytes, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


# --- one row ------------------------------------------------------------------------------


def _row(
    record: RawRecord,
    source: InputSource,
    specs: tuple[InputSpec, ...],
    wanted: dict[str, str],
    today: dt.date | None,
) -> Row:
    where = record.where(source.path.name)
    if record.values is None:
        return Row(record.number, None, None, f"{where}: {record.error}")
    raw = {name: record.values[column] for name, column in wanted.items() if column in record.values}
    row_id, id_error = _row_id(record.values, raw, source.id_column)
    where = f"{where} (id {describe(row_id)})" if row_id is not None else where
    if id_error:
        return Row(record.number, row_id, None, f"{where}: {id_error}")
    labels = {name: _label(name, column) for name, column in wanted.items()}
    try:
        return Row(record.number, row_id, coerce_inputs(specs, raw, source=where, labels=labels, today=today))
    except InputError as exc:
        return Row(record.number, row_id, None, str(exc))


def _row_id(values: dict[str, Any], raw: dict[str, Any], id_column: str | None) -> tuple[str | None, str | None]:
    if id_column is None:
        return row_hash_id(raw), None
    value = values.get(id_column)
    if is_empty(value):
        return None, f"column '{id_column}' (the row id) is empty"
    if isinstance(value, bool) or not isinstance(value, str | int):
        return None, f"column '{id_column}' (the row id): expected text or an integer, got {describe(value)}"
    text = str(value).strip()
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return None, f"column '{id_column}' (the row id) holds invalid UTF-8"
    return text, None


def _label(name: str, column: str) -> str:
    return f"column '{column}'" if name == column else f"column '{column}' (input '{name}')"


def _duplicate_message(record: RawRecord, source: InputSource, row_id: str, first: int) -> str:
    where = f"{record.where(source.path.name)} (id {describe(row_id)})"
    how = "" if source.id_column else "; rows with identical inputs share an id, pass --id-column to tell them apart"
    return f"{where}: duplicate id, already used by row {first}{how}"


def _check_columns(source: InputSource, specs: tuple[InputSpec, ...], columns: list[str] | None) -> None:
    """A required column missing from a header or schema fails the whole file, up front."""
    if columns is None:
        return
    present = set(columns)
    problems = []
    if source.id_column and source.id_column not in present:
        problems.append(f"the id column '{source.id_column}' is not in the file")
    for spec in specs:
        column = source.column_for(spec.name)
        if column in present:
            continue
        if spec.name in source.mapping:
            problems.append(f"column '{column}' (mapped to input '{spec.name}') is not in the file")
        elif spec.required and not spec.has_default:
            problems.append(
                f"column '{column}' for the required input '{spec.name}' is not in the file "
                f"(map another column with --map {spec.name}=COLUMN)"
            )
    if problems:
        listed = ", ".join(columns) or "none"
        raise InputError("\n".join(f"{source.path}: {p}; columns: {listed}" for p in problems))
