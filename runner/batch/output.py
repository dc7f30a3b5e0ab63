"""The batch output file: one record per input row, in input order, read from the journal.

Columns: ``id``, ``row``, ``status``, ``output``, ``cost_usd``, ``tokens``, ``error``,
``error_kind``, ``attempts``, ``run_id``, ``fingerprint`` (the configuration the answer was made
under: :mod:`runner.batch.fingerprint`), ``warnings``, ``degraded`` (the steps whose calls went to
a fallback model under a budget's ``on_exceed: degrade``: :class:`~runner.core.degradation.Degradation`),
and with ``--keep-columns`` the input's columns (``input``). In JSONL ``output``, ``input``,
``warnings`` and ``degraded`` are JSON values; in CSV and Parquet an answer that is an object gets
a column per field (``output.category``; a nested value as JSON text), kept columns are
``input.<name>``, and ``warnings`` and ``degraded`` are JSON text, empty when there are none (see :class:`FlatLayout`). ``cost_usd`` and ``tokens`` add up
every attempt of the row; ``warnings`` says when that spend is partly an estimate (calls a
crash left in flight, counted at their worst case) or when the endpoint reported more than
was reserved.

CSV cells are escaped against formula injection: a text cell starting with ``=``, ``+``,
``-``, ``@``, a tab or a carriage return gets a leading ``'`` so a spreadsheet shows it as
text instead of evaluating it (model output is untrusted). The file is written next to its
destination and renamed over it, so readers never see half a file.

The output may be a URL (``s3://...``, see :mod:`runner.locations`): the file is written
locally, then uploaded in one request.

One batch at a time per output: :func:`exclusive_output` holds, for a local file, an exclusive
``flock`` on ``.<name>.lock`` next to it for the whole batch (the kernel drops it when the
process dies; the batch removes the file when it ends, refused at start or not), and for a URL the lock of :mod:`runner.batch.output_lock` (in the PostgreSQL
store, or a lock object next to the output), so a second batch writing the same output is
refused (naming the first) instead of silently replacing its records.
:func:`check_output_target` refuses an output that is the batch's own input or journal, or
any SQLite database (another batch's journal, a run store).
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runner.batch.journal import JournalRow
from runner.batch.records import BatchRecords
from runner.errors import UsageError
from runner.files import replacing
from runner.locations import Location, location, upload_file
from runner.store.file_lock import held_lock_file

COLUMNS = ("id", "row", "status", "output", "cost_usd", "tokens", "error", "error_kind", "attempts", "run_id", "fingerprint",
           "warnings", "degraded")
OUTPUT_FORMATS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".csv": "csv", ".parquet": "parquet", ".pq": "parquet"}
if TYPE_CHECKING:
    from runner.batch.output_lock import OutputHold

_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def output_format(path: Location, explicit: str | None = None) -> str:
    """``jsonl``, ``csv`` or ``parquet``, from ``explicit`` or the suffix of ``path``."""
    fmt = explicit or OUTPUT_FORMATS.get(path.suffix.lower())
    if fmt not in ("jsonl", "csv", "parquet"):
        raise UsageError(f"{path}: cannot tell the output format; name it .jsonl, .csv or .parquet")
    return fmt


_SQLITE_MAGIC = b"SQLite format 3\x00"


def output_lock_path(path: Path) -> Path:
    """``<dir>/.<name>.lock``, next to the resolved output (so two spellings share one lock)."""
    resolved = path.resolve()
    return resolved.parent / f".{resolved.name}.lock"


@contextlib.contextmanager
def exclusive_output(path: Location, holder: Mapping[str, Any], *, store_url: str | None = None) -> Iterator[OutputHold]:
    """Hold the output's lock for the block; :class:`UsageError` if another batch holds it.

    ``holder`` (task, input, journal, ...) is written into the lock so the batch refused can
    name the one that holds it. A URL's lock is in the PostgreSQL store ``store_url`` when
    given, else a lock object next to it (:mod:`runner.batch.output_lock`); it can be lost
    while the batch runs, which the yielded :class:`~runner.batch.output_lock.OutputHold`
    tells (a local file's ``flock`` cannot be lost while its process lives).
    """
    from runner.batch.output_lock import OutputHold

    if not isinstance(path, Path):
        from runner.batch.output_lock import exclusive_url_output

        with exclusive_url_output(path, holder, store_url=store_url) as hold:
            yield hold
        return
    lock_path = output_lock_path(path)
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        fd = _open_lock(lock_path, path)
        if _same_file(lock_path, fd):  # else the holder removed it after we opened it: open the new one
            break
        os.close(fd)
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps({"pid": os.getpid(), **holder}, default=str).encode(), 0)
        yield OutputHold(path, holder)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(lock_path)  # while still held: a batch that opened it meanwhile sees it is gone and retries
        os.close(fd)


def _open_lock(lock_path: Path, path: Path) -> int:
    """The lock file's descriptor, locked (:class:`UsageError` naming the holder if it is busy)."""
    return held_lock_file(lock_path, "the output's lock", lambda fd: _busy_message(path, fd), mode=0o644)


def _same_file(lock_path: Path, fd: int) -> bool:
    """Whether ``lock_path`` still names the file open as ``fd`` (a finished batch removes its lock)."""
    try:
        found = os.stat(lock_path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (found.st_dev, found.st_ino) == (mine.st_dev, mine.st_ino)


def _busy_message(path: Path, fd: int) -> str:
    from runner.batch.output_holder import busy_message

    try:
        holder = json.loads(os.pread(fd, 65536, 0) or b"{}")
    except ValueError:
        holder = {}
    return busy_message(path, holder if isinstance(holder, dict) else {})


def check_output_target(path: Path, *, input_path: Path, journal_path: Path) -> None:
    """Refuse an output that would overwrite the input, the journal, a SQLite database, or that is
    not a regular file (``/dev/stdout`` is a symlink the atomic rename would replace)."""
    if path.is_symlink() or (path.exists() and not path.is_file()):
        raise UsageError(
            f"--output {path} exists and is not a regular file (a symlink, directory, FIFO or device); "
            "give the path of a regular file"
        )
    target = path.resolve()
    if path.exists() and os.path.samefile(path, input_path):
        raise UsageError(f"--output {path} is the input file; the batch would overwrite its own input. Choose another --output")
    journal = journal_path.resolve()
    if target in {journal, *(Path(f"{journal}{suffix}") for suffix in ("-wal", "-shm", ".lock"))}:
        raise UsageError(f"--output {path} is this batch's journal ({journal_path}); choose another --output")
    if target.is_file():
        with target.open("rb") as handle:
            if handle.read(len(_SQLITE_MAGIC)) == _SQLITE_MAGIC:
                raise UsageError(
                    f"--output {path} is an SQLite database (another batch's journal, or a run store?); "
                    "it will not be overwritten. Choose another --output"
                )


def write_output(journal: BatchRecords, path: str | Location, *, format: str | None = None,
                 kept: KeptColumns | None = None) -> int:
    """Write every row's record to ``path`` (a local path, written atomically, or a URL, uploaded
    whole); returns the number of records. ``kept`` copies input columns into each record."""
    target = location(path)
    fmt = output_format(target, format)
    fingerprint = journal.meta.get("fingerprint")

    def records() -> Iterator[dict[str, Any]]:
        rows = journal.records()
        joined = kept.join(rows) if kept is not None else ((row, None) for row in rows)
        for row, values in joined:
            yield output_record(row, fingerprint, values)

    writer = {"jsonl": _write_jsonl, "csv": _write_csv, "parquet": _write_parquet}[fmt]
    if isinstance(target, Path):
        with replacing(target) as temp:
            return writer(records, temp)
    with tempfile.TemporaryDirectory(prefix="runner-output-") as staging:
        local = Path(staging) / target.name
        count = writer(records, local)
        upload_file(local, target)
    return count


@dataclass(frozen=True)
class KeptColumns:
    """Input columns copied into each output record (``--keep-columns a,b`` or ``all``): read from
    the input file again, row by row alongside the journal (both are in input order)."""

    path: Path
    format: str
    columns: tuple[str, ...] | None  # None: every column

    @classmethod
    def parse(cls, text: str, path: Path, fmt: str) -> KeptColumns:
        """``a,b`` or ``all``; a column the file's header or schema lacks is a :class:`UsageError`."""
        from runner.batch.readers import file_columns

        if text.strip() == "all":
            return cls(path, fmt, None)
        names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
        if not names:
            raise UsageError("--keep-columns: give column names separated by commas, or 'all'")
        present = file_columns(path, fmt)
        missing = [n for n in names if present is not None and n not in present]
        if missing:
            raise UsageError(f"--keep-columns: {', '.join(missing)} not in {path.name} (columns: {', '.join(present or [])})")
        return cls(path, fmt, names)

    def join(self, rows: Iterator[JournalRow]) -> Iterator[tuple[JournalRow, dict[str, Any] | None]]:
        from runner.batch.readers import read_records

        found = read_records(self.path, self.format, self.columns)
        raw = next(found, None)
        for row in rows:
            while raw is not None and raw.number < row.number:
                raw = next(found, None)
            values = raw.values if raw is not None and raw.number == row.number else None
            yield row, values if values is None or self.columns is None else {c: values.get(c) for c in self.columns}


def output_record(record: JournalRow, fingerprint: str | None = None, kept: dict[str, Any] | None = None) -> dict[str, Any]:
    """One output record (``output`` as a JSON value); ``fingerprint`` is the journal's, for rows
    without one of their own; ``kept`` the input columns copied in (``input``)."""
    made_under = record.fingerprint or fingerprint
    found = {
        "id": record.id,
        "row": record.number,
        "status": record.status,
        "output": record.output,
        "cost_usd": round(record.usage.cost_usd, 8),
        "tokens": record.usage.total_tokens,
        "error": record.error,
        "error_kind": record.error_kind,
        "attempts": record.attempts,
        "run_id": record.run_id,
        "fingerprint": made_under[:12] if made_under and record.attempts else None,
        "warnings": list(record.warnings),
        "degraded": [d.as_dict() for d in record.degraded],
    }
    if kept is not None:
        found["input"] = kept
    return found


def escape_formula(value: Any) -> Any:
    """``'=cmd()`` for ``=cmd()``: text a spreadsheet would evaluate is made literal."""
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value


Records = Callable[[], Iterator[dict[str, Any]]]
"""The output records, streamed afresh on each call (a flat file reads them twice: its columns, then its rows)."""


def _write_jsonl(records: Records, path: Path) -> int:
    count = 0
    with path.open("w", encoding="utf-8") as out:
        for record in records():
            out.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")
            count += 1
    return count


def _write_csv(records: Records, path: Path) -> int:
    layout = FlatLayout.of(records())
    count = 0
    with path.open("w", encoding="utf-8", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(layout.columns)
        for record in records():
            flat = layout.flat(record)
            writer.writerow([escape_formula(flat[c]) for c in layout.columns])
            count += 1
    return count


def _write_parquet(records: Records, path: Path, batch_rows: int = 5000) -> int:
    import pyarrow as pa
    import pyarrow.parquet as pq

    layout = FlatLayout.of(records())
    types = {"int": pa.int64(), "float": pa.float64(), "bool": pa.bool_(), "text": pa.string()}
    schema = pa.schema([(name, types[layout.kinds[name]]) for name in layout.columns])
    count, batch = 0, []
    with pq.ParquetWriter(path, schema) as writer:
        for record in records():
            batch.append(layout.flat(record))
            count += 1
            if len(batch) >= batch_rows:
                writer.write_table(pa.Table.from_pylist(batch, schema=schema))
                batch = []
        if batch or count == 0:
            writer.write_table(pa.Table.from_pylist(batch, schema=schema))
    return count


_KINDS = {"id": "text", "row": "int", "status": "text", "output": "text", "cost_usd": "float", "tokens": "int",
          "error": "text", "error_kind": "text", "attempts": "int", "run_id": "text", "fingerprint": "text",
          "warnings": "text", "degraded": "text"}  # fmt: skip


@dataclass
class FlatLayout:
    """The columns of a CSV or Parquet output: the record's, with an answer that is an object spread
    into ``output.<field>`` columns (nested values as JSON text) and kept input columns as ``input.<column>``.
    ``output`` stays a column (JSON text) only when some answer is not an object."""

    columns: list[str]
    kinds: dict[str, str]

    @classmethod
    def of(cls, records: Iterator[dict[str, Any]]) -> FlatLayout:
        answers: dict[str, str] = {}
        inputs: dict[str, str] = {}
        whole = False
        for record in records:
            output = record["output"]
            if isinstance(output, dict):
                for key, value in output.items():
                    answers[key] = _kind(answers.get(key), value)
            elif output is not None:
                whole = True
            for key, value in (record.get("input") or {}).items():
                inputs[key] = _kind(inputs.get(key), value)
        base = [c for c in COLUMNS if c != "output" or whole or not answers]
        at = base.index("cost_usd")
        spread = [f"output.{k}" for k in answers]
        columns = [*base[:at], *spread, *base[at:], *(f"input.{k}" for k in inputs)]
        kinds = {**_KINDS, **{f"output.{k}": v for k, v in answers.items()}, **{f"input.{k}": v for k, v in inputs.items()}}
        return cls(columns, {c: kinds.get(c) or "text" for c in columns})

    def flat(self, record: dict[str, Any]) -> dict[str, Any]:
        output, warnings, degraded = record["output"], record["warnings"], record["degraded"]
        cells: dict[str, Any] = {
            **record,
            "output": None if output is None else _text(output),
            "warnings": json.dumps(warnings, ensure_ascii=False) if warnings else None,
            "degraded": json.dumps(degraded, ensure_ascii=False) if degraded else None,
        }
        if isinstance(output, dict):
            cells.update({f"output.{k}": v for k, v in output.items()})
        cells.update({f"input.{k}": v for k, v in (record.get("input") or {}).items()})
        return {c: _cell(cells.get(c), self.kinds[c]) for c in self.columns}


def _kind(before: str | None, value: Any) -> str:
    """The column type that holds ``before``'s values and ``value``: int, float, bool, else text."""
    if value is None:
        return before or ""
    found = "bool" if isinstance(value, bool) else "int" if isinstance(value, int) else "float" if isinstance(value, float) else "text"
    if not before or before == found:
        return found
    return "float" if {before, found} == {"int", "float"} else "text"


def _cell(value: Any, kind: str) -> Any:
    if value is None:
        return None
    if kind == "text":
        return value if isinstance(value, str) else _text(value)
    if kind == "float":
        return float(value)
    return value


def _text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)
