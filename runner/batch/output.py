"""The batch output file: one record per input row, in input order, read from the journal.

Columns: ``id``, ``row``, ``status``, ``output``, ``cost_usd``, ``tokens``, ``error``,
``error_kind``, ``attempts``, ``run_id``, ``warnings``. In JSONL ``output`` and ``warnings``
are JSON values; in CSV and Parquet they are JSON text. ``cost_usd`` and ``tokens`` add up
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
process dies), and for a URL the lock of :mod:`runner.batch.output_lock` (in the PostgreSQL
store, or a lock object next to the output), so a second batch writing the same output is
refused (naming the first) instead of silently replacing its records.
:func:`check_output_target` refuses an output that is the batch's own input or journal, or
any SQLite database (another batch's journal, a run store).
"""

from __future__ import annotations

import contextlib
import csv
import errno
import fcntl
import json
import os
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runner.batch.journal import JournalRow
from runner.batch.records import BatchRecords
from runner.errors import UsageError
from runner.files import replacing
from runner.locations import Location, location, upload_file

COLUMNS = ("id", "row", "status", "output", "cost_usd", "tokens", "error", "error_kind", "attempts", "run_id", "warnings")
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
    # O_NOFOLLOW: a planted symlink must not make us truncate a file elsewhere.
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except OSError as error:
        if error.errno != errno.ELOOP:
            raise
        raise UsageError(f"{lock_path} (the output's lock) is a symbolic link, which the runner does not follow; "
                         "remove it (the runner makes its own)") from None  # fmt: skip
    if os.fstat(fd).st_nlink > 1:  # a planted hard link: the truncate and write below would reach its other name
        os.close(fd)
        raise UsageError(f"{lock_path} (the output's lock) is a hard link to another file, which the runner would "
                         "overwrite; remove it (the runner makes its own)")  # fmt: skip
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UsageError(_busy_message(path, fd)) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps({"pid": os.getpid(), **holder}, default=str).encode(), 0)
        yield OutputHold(path, holder)
    finally:
        os.close(fd)


def _busy_message(path: Path, fd: int) -> str:
    from runner.batch.output_lock import busy_message

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


def write_output(journal: BatchRecords, path: str | Location, *, format: str | None = None) -> int:
    """Write every row's record to ``path`` (a local path, written atomically, or a URL, uploaded
    whole); returns the number of records."""
    target = location(path)
    writer = {"jsonl": _write_jsonl, "csv": _write_csv, "parquet": _write_parquet}[output_format(target, format)]
    if isinstance(target, Path):
        with replacing(target) as temp:
            return writer(journal.records(), temp)
    with tempfile.TemporaryDirectory(prefix="runner-output-") as staging:
        local = Path(staging) / target.name
        count = writer(journal.records(), local)
        upload_file(local, target)
    return count


def output_record(record: JournalRow) -> dict[str, Any]:
    """One output record (``output`` as a JSON value)."""
    return {
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
        "warnings": list(record.warnings),
    }


def escape_formula(value: Any) -> Any:
    """``'=cmd()`` for ``=cmd()``: text a spreadsheet would evaluate is made literal."""
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value


def _write_jsonl(records: Iterator[JournalRow], path: Path) -> int:
    count = 0
    with path.open("w", encoding="utf-8") as out:
        for record in records:
            out.write(json.dumps(output_record(record), ensure_ascii=False, default=str) + "\n")
            count += 1
    return count


def _write_csv(records: Iterator[JournalRow], path: Path) -> int:
    count = 0
    with path.open("w", encoding="utf-8", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(COLUMNS)
        for record in records:
            flat = _flat(output_record(record))
            writer.writerow([escape_formula(flat[c]) for c in COLUMNS])
            count += 1
    return count


def _write_parquet(records: Iterator[JournalRow], path: Path, batch_rows: int = 5000) -> int:
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema(
        [
            ("id", pa.string()),
            ("row", pa.int64()),
            ("status", pa.string()),
            ("output", pa.string()),
            ("cost_usd", pa.float64()),
            ("tokens", pa.int64()),
            ("error", pa.string()),
            ("error_kind", pa.string()),
            ("attempts", pa.int64()),
            ("run_id", pa.string()),
            ("warnings", pa.string()),
        ]
    )
    count, batch = 0, []
    with pq.ParquetWriter(path, schema) as writer:
        for record in records:
            batch.append(_flat(output_record(record)))
            count += 1
            if len(batch) >= batch_rows:
                writer.write_table(pa.Table.from_pylist(batch, schema=schema))
                batch = []
        if batch or count == 0:
            writer.write_table(pa.Table.from_pylist(batch, schema=schema))
    return count


def _flat(record: dict[str, Any]) -> dict[str, Any]:
    output, warnings = record["output"], record["warnings"]
    return {
        **record,
        "output": None if output is None else json.dumps(output, ensure_ascii=False, default=str),
        "warnings": json.dumps(warnings, ensure_ascii=False) if warnings else None,
    }
