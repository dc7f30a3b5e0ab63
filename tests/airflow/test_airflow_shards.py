"""Splitting batch inputs into shards and merging outputs (no Airflow needed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runner.airflow.shards import merge_files, split_file, write_batch_report


def _jsonl(path: Path, n: int) -> Path:
    path.write_text("".join(json.dumps({"id": i, "text": f"row {i}"}) + "\n" for i in range(n)) + "\n\n")
    return path


def test_jsonl_split_is_contiguous_balanced_and_lossless(tmp_path: Path) -> None:
    source = _jsonl(tmp_path / "in.jsonl", 10)
    paths = split_file(source, tmp_path / "shards", num_shards=3)
    assert [Path(p).name for p in paths] == [f"shard-0000{i}-of-00003.jsonl" for i in range(3)]
    sizes = [len(Path(p).read_text().splitlines()) for p in paths]
    assert sizes == [4, 3, 3]
    joined = "".join(Path(p).read_text() for p in paths)
    assert joined == "".join(line + "\n" for line in source.read_text().splitlines() if line)


def test_more_shards_than_rows_gives_no_empty_shard(tmp_path: Path) -> None:
    paths = split_file(_jsonl(tmp_path / "in.jsonl", 2), tmp_path / "s", num_shards=8)
    assert len(paths) == 2
    assert all(Path(p).read_text().strip() for p in paths)


def test_shard_size_and_empty_input(tmp_path: Path) -> None:
    assert len(split_file(_jsonl(tmp_path / "in.jsonl", 7), tmp_path / "s", shard_size=3)) == 3
    (tmp_path / "empty.jsonl").write_text("\n")
    assert split_file(tmp_path / "empty.jsonl", tmp_path / "e", num_shards=2) == []
    with pytest.raises(ValueError, match="exactly one"):
        split_file(tmp_path / "empty.jsonl", tmp_path / "e")
    with pytest.raises(ValueError, match="cannot shard"):
        split_file(tmp_path / "in.txt", tmp_path / "e", num_shards=2)


def test_resplit_is_byte_identical_and_leaves_no_temp_files(tmp_path: Path) -> None:
    source = _jsonl(tmp_path / "in.jsonl", 9)
    first = {p: Path(p).read_bytes() for p in split_file(source, tmp_path / "s", num_shards=2)}
    second = {p: Path(p).read_bytes() for p in split_file(source, tmp_path / "s", num_shards=2)}
    assert first == second
    assert sorted(p.name for p in (tmp_path / "s").iterdir()) == sorted(Path(p).name for p in first)


def test_csv_keeps_header_per_shard_and_quoted_newlines(tmp_path: Path) -> None:
    source = tmp_path / "in.csv"
    source.write_text('id,text\n1,plain\n2,"two\nlines"\n3,"a, comma"\n\n4,last\n')
    paths = split_file(source, tmp_path / "s", num_shards=2)
    assert [Path(p).read_text().splitlines()[0] for p in paths] == ["id,text", "id,text"]
    merged = merge_files(paths, tmp_path / "out.csv")
    assert merged["records"] == 4
    assert (tmp_path / "out.csv").read_text() == 'id,text\n1,plain\n2,"two\nlines"\n3,"a, comma"\n4,last\n'


def test_parquet_roundtrip(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"id": list(range(5)), "text": [f"t{i}" for i in range(5)]}), tmp_path / "in.parquet")
    paths = split_file(tmp_path / "in.parquet", tmp_path / "s", num_shards=2)
    assert [pq.read_table(p).num_rows for p in paths] == [3, 2]
    merged = merge_files(paths, tmp_path / "out.parquet")
    assert merged["records"] == 5
    assert pq.read_table(tmp_path / "out.parquet").column("id").to_pylist() == list(range(5))


def test_merge_reports_missing_parts_and_report_totals(tmp_path: Path) -> None:
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text('{"x": 1}\n')
    b.write_text('{"x": 2}\n{"x": 3}\n')
    merged = merge_files([a, tmp_path / "gone.jsonl", b], tmp_path / "out" / "all.jsonl")
    assert merged["records"] == 3 and merged["parts"] == 2
    assert merged["missing"] == [str(tmp_path / "gone.jsonl")]
    assert (tmp_path / "out" / "all.jsonl").read_text() == '{"x": 1}\n{"x": 2}\n{"x": 3}\n'
    shards = [
        {"shard": "s0", "total": 1, "done": 1, "failed": 0, "skipped": 0, "cost_usd": 0.25, "output_path": str(a)},
        {"shard": "s1", "total": 2, "done": 1, "failed": 1, "skipped": 0, "cost_usd": 0.5, "output_path": str(b)},
    ]
    summary = write_batch_report(tmp_path / "report.json", shards, merged)
    assert summary["total"] == 3 and summary["done"] == 2 and summary["failed"] == 1
    assert summary["cost_usd"] == pytest.approx(0.75)
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["shards"] == 2 and report["records"] == 3 and len(report["per_shard"]) == 2
    assert "| s1 | 2 | 1 | 1 | 0 |" in (tmp_path / "report.md").read_text()
