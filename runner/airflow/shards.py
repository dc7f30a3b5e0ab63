"""Splitting a batch input file into shards and merging the shard outputs. No Airflow here.

Used by :mod:`runner.airflow.fanout`; kept free of Airflow imports so it can be tested (and
used from a plain script) without Airflow installed.

Formats, by file suffix: ``.jsonl``/``.ndjson`` (one record a line; blank lines dropped),
``.csv`` (the header is repeated in every shard and written once in the merge) and
``.parquet`` (via pyarrow). Every file is written atomically: to a temporary file in the same
directory, fsynced, then renamed over the target, so a reader on a shared path never sees a
half-written shard and a retried split simply replaces the same files with the same bytes.
"""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from runner.files import write_atomic, write_text_atomic

LINE_SUFFIXES = (".jsonl", ".ndjson")
SUFFIXES = (*LINE_SUFFIXES, ".csv", ".parquet")


def _suffix(path: Path) -> str:
    suffix = Path(path).suffix.lower()
    if suffix not in SUFFIXES:
        raise ValueError(f"{path}: cannot shard a '{suffix or 'suffix-less'}' file; use one of {', '.join(SUFFIXES)}")
    return suffix


def _chunks(count: int, num_shards: int) -> list[tuple[int, int]]:
    """``num_shards`` contiguous [start, end) ranges over ``count`` items, sizes differing by <= 1."""
    base, extra = divmod(count, num_shards)
    ranges, start = [], 0
    for i in range(num_shards):
        end = start + base + (1 if i < extra else 0)
        ranges.append((start, end))
        start = end
    return ranges


def shard_name(index: int, total: int, suffix: str) -> str:
    return f"shard-{index:05d}-of-{total:05d}{suffix}"


def split_file(
    input_path: str | os.PathLike[str],
    shard_dir: str | os.PathLike[str],
    *,
    num_shards: int | None = None,
    shard_size: int | None = None,
) -> list[str]:
    """Split ``input_path`` into contiguous shards in ``shard_dir``; return their paths in order.

    Give ``num_shards`` (at most that many; never an empty shard) or ``shard_size`` (records a
    shard). Records keep their order, so concatenating the shards gives the input back.
    An empty input gives no shards.
    """
    source, target = Path(input_path), Path(shard_dir)
    if (num_shards is None) == (shard_size is None):
        raise ValueError("give exactly one of num_shards or shard_size")
    if num_shards is not None and int(num_shards) < 1:
        raise ValueError(f"num_shards must be >= 1, got {num_shards}")
    if shard_size is not None and int(shard_size) < 1:
        raise ValueError(f"shard_size must be >= 1, got {shard_size}")
    suffix = _suffix(source)
    header, records = _read_records(source, suffix)
    count = len(records) if not isinstance(records, int) else records
    if count == 0:
        return []
    n = min(int(num_shards), count) if num_shards is not None else -(-count // int(shard_size))  # type: ignore[arg-type]
    paths: list[str] = []
    for i, (start, end) in enumerate(_chunks(count, n)):
        path = target / shard_name(i, n, suffix)
        if suffix == ".parquet":
            _write_parquet_slice(source, path, start, end)
        else:
            assert not isinstance(records, int)
            write_text_atomic(path, header + "".join(records[start:end]))
        paths.append(str(path))
    return paths


def _read_records(path: Path, suffix: str) -> tuple[str, list[str] | int]:
    """The header text (CSV only) and the records as text lines, or the row count (Parquet)."""
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        return "", int(pq.ParquetFile(path).metadata.num_rows)
    text = path.read_text(encoding="utf-8")
    if suffix in LINE_SUFFIXES:
        return "", [line + "\n" for line in text.splitlines() if line.strip()]
    # CSV: split by records, not lines (a quoted cell may hold a newline).
    rows = list(csv.reader(io.StringIO(text, newline="")))
    if not rows:
        return "", []
    header, body = rows[0], [r for r in rows[1:] if any(cell.strip() for cell in r)]
    return _csv_text([header]), [_csv_text([r]) for r in body]


def _csv_text(rows: Iterable[Sequence[str]]) -> str:
    buffer = io.StringIO(newline="")
    csv.writer(buffer, lineterminator="\n").writerows(rows)
    return buffer.getvalue()


def _write_parquet_slice(source: Path, target: Path, start: int, end: int) -> None:
    import pyarrow.parquet as pq

    table = pq.read_table(source).slice(start, end - start)
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    write_atomic(target, buffer.getvalue())


def merge_files(parts: Sequence[str | os.PathLike[str]], output_path: str | os.PathLike[str]) -> dict[str, Any]:
    """Concatenate ``parts`` (in the order given) into ``output_path`` atomically.

    Missing parts are reported, not fatal: ``{"output_path", "records", "parts", "missing"}``.
    CSV headers are written once (from the first part that has one).
    """
    target = Path(output_path)
    suffix = _suffix(target)
    present = [Path(p) for p in parts if Path(p).is_file()]
    missing = [str(p) for p in parts if not Path(p).is_file()]
    records = 0
    if suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        tables = [pq.read_table(p) for p in present]
        table = pa.concat_tables(tables, promote_options="default") if tables else pa.table({})
        records = table.num_rows
        buffer = io.BytesIO()
        pq.write_table(table, buffer)
        write_atomic(target, buffer.getvalue())
    else:
        header, chunks = "", []
        for part in present:
            part_header, part_records = _read_records(part, suffix)
            assert not isinstance(part_records, int)
            header = header or part_header
            chunks.extend(part_records)
        records = len(chunks)
        write_text_atomic(target, header + "".join(chunks))
    return {"output_path": str(target), "records": records, "parts": len(present), "missing": missing}


def write_batch_report(
    report_path: str | os.PathLike[str], shard_manifests: Sequence[dict[str, Any]], merged: dict[str, Any]
) -> dict[str, Any]:
    """Write the fan-out's batch report (JSON, plus a Markdown twin) and return its totals."""
    keys = ("total", "done", "failed", "skipped")
    totals: dict[str, Any] = {k: sum(int(m.get(k) or 0) for m in shard_manifests) for k in keys}
    totals["cost_usd"] = round(sum(float(m.get("cost_usd") or 0.0) for m in shard_manifests), 8)
    report = {
        "kind": "runner-airflow-batch-report",
        "shards": len(shard_manifests),
        **totals,
        "output_path": merged.get("output_path"),
        "records": merged.get("records"),
        "missing_parts": merged.get("missing", []),
        "per_shard": [
            {
                k: m.get(k)
                for k in ("shard", "total", "done", "failed", "skipped", "cost_usd", "output_path", "report_path")
            }
            for m in shard_manifests
        ],
    }
    path = Path(report_path)
    write_text_atomic(path, json.dumps(report, indent=2, sort_keys=True) + "\n")
    lines = [
        "# Batch report",
        "",
        f"- shards: {report['shards']}",
        f"- rows: {totals['total']} (done {totals['done']}, failed {totals['failed']}, skipped {totals['skipped']})",
        f"- cost: {totals['cost_usd']:.6f} USD",
        f"- merged output: {report['output_path']} ({report['records']} records)",
        "",
        "| shard | total | done | failed | skipped | cost (USD) |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for m in report["per_shard"]:
        lines.append(
            f"| {Path(str(m['shard'])).name} | {m['total']} | {m['done']} | {m['failed']} | {m['skipped']} "
            f"| {float(m['cost_usd'] or 0):.6f} |"
        )
    write_text_atomic(path.with_suffix(".md"), "\n".join(lines) + "\n")
    return {"report_path": str(path), **totals, "output_path": report["output_path"], "shards": report["shards"]}
