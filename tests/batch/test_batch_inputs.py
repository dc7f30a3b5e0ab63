"""Reading batch input files: formats, per-row errors, ids, mapping."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from runner.batch.inputs import InputSource, parse_mapping, read_rows, row_hash_id
from runner.config.specs import InputSpec
from runner.errors import InputError, UsageError

SPECS = (
    InputSpec("subject", "string"),
    InputSpec("count", "integer", default=1, has_default=True, required=False),
)


def rows(path: Path, specs=SPECS, **kw: object) -> list:
    return list(read_rows(InputSource.open(path, **kw), specs))  # type: ignore[arg-type]


def test_csv_values_are_text_as_written_and_empty_cells_are_empty(tmp_path: Path) -> None:
    path = tmp_path / "in.csv"
    path.write_text('id,subject,count\n1,NA,\n2,"a, ""quoted""\nvalue",7\n', encoding="utf-8")
    got = rows(path, id_column="id")
    assert [(r.number, r.id, r.inputs) for r in got] == [
        (1, "1", {"subject": "NA", "count": 1}),
        (2, "2", {"subject": 'a, "quoted"\nvalue', "count": 7}),
    ]


def test_csv_bom_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "bom.csv"
    path.write_bytes(b"\xef\xbb\xbfid,subject\nA,hello\n")
    assert rows(path, id_column="id")[0].inputs == {"subject": "hello", "count": 1}


def test_csv_invalid_utf8_is_a_row_error_naming_row_and_column(tmp_path: Path) -> None:
    path = tmp_path / "bad.csv"
    path.write_bytes(b"id,subject\nA,fine\nB,caf\xe9\nC,ok\n")
    got = rows(path, id_column="id")
    assert [r.valid for r in got] == [True, False, True]
    assert got[1].error == "bad.csv row 2: invalid UTF-8 in column 'subject'"


def test_csv_row_errors_name_row_id_column_and_expectation(tmp_path: Path) -> None:
    path = tmp_path / "in.csv"
    path.write_text("id,subject,count\nA,x,1.5\nB,,2\nC,y,3\n", encoding="utf-8")
    got = rows(path, id_column="id")
    assert got[0].error == "in.csv row 1 (id 'A'): column 'count': expected an integer, got '1.5'"
    assert got[1].error == "in.csv row 2 (id 'B'): column 'subject': a value is required, but it is empty ('')"
    assert got[2].inputs == {"subject": "y", "count": 3}


def test_missing_required_column_fails_the_file_up_front(tmp_path: Path) -> None:
    path = tmp_path / "in.csv"
    path.write_text("id,title\nA,x\n", encoding="utf-8")
    with pytest.raises(InputError) as caught:
        rows(path, id_column="id")
    message = str(caught.value)
    assert "column 'subject' for the required input 'subject' is not in the file" in message
    assert "--map subject=COLUMN" in message and "columns: id, title" in message
    # an optional column may be absent: its default is used
    assert rows(path, id_column="id", mapping={"subject": "title"})[0].inputs == {"subject": "x", "count": 1}


def test_mapped_or_id_column_missing_fails_up_front(tmp_path: Path) -> None:
    path = tmp_path / "in.csv"
    path.write_text("id,subject\nA,x\n", encoding="utf-8")
    with pytest.raises(InputError, match="column 'n' \\(mapped to input 'count'\\) is not in the file"):
        rows(path, mapping={"count": "n"})
    with pytest.raises(InputError, match="the id column 'key' is not in the file"):
        rows(path, id_column="key")


def test_duplicate_header_fails_and_a_ragged_row_is_a_row_error(tmp_path: Path) -> None:
    dup = tmp_path / "dup.csv"
    dup.write_text("id,subject,subject\nA,x,y\n", encoding="utf-8")
    with pytest.raises(InputError, match="names column 'subject' twice"):
        rows(dup)
    ragged = tmp_path / "ragged.csv"
    ragged.write_text("id,subject\nA,x\nB,y,z\nC,w\n", encoding="utf-8")
    got = rows(ragged)
    assert [r.valid for r in got] == [True, False, True]
    assert got[1].error == "ragged.csv row 2: line 3 has 3 fields, the header has 2 (a value containing a comma must be quoted)"


def test_duplicate_ids_make_the_later_row_invalid(tmp_path: Path) -> None:
    path = tmp_path / "in.csv"
    path.write_text("id,subject\nA,x\nB,y\nA,z\n", encoding="utf-8")
    got = rows(path, id_column="id")
    assert [r.valid for r in got] == [True, True, False]
    assert got[2].error == "in.csv row 3 (id 'A'): duplicate id, already used by row 1"


def test_hash_ids_are_stable_and_identical_rows_collide(tmp_path: Path) -> None:
    path = tmp_path / "in.csv"
    path.write_text("subject,count,ignored\nx,2,a\ny,2,b\nx,2,c\n", encoding="utf-8")
    got = rows(path)
    assert got[0].id == row_hash_id({"subject": "x", "count": "2"}) and len(got[0].id or "") == 16
    assert got[0].id != got[1].id
    assert not got[2].valid and "pass --id-column" in (got[2].error or "")
    assert [r.id for r in rows(path)] == [r.id for r in got]  # same file, same ids


def test_empty_id_is_a_row_error(tmp_path: Path) -> None:
    path = tmp_path / "in.csv"
    path.write_text("id,subject\n,x\n", encoding="utf-8")
    assert rows(path, id_column="id")[0].error == "in.csv row 1: column 'id' (the row id) is empty"


def test_jsonl_per_line_errors(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    lines = [
        b'\xef\xbb\xbf{"id": "a", "subject": "bom first line"}',
        b'{"id": "b", "subject": "x", "count": NaN}',
        b'{"id": "c", "subject": "x", "subject": "y"}',
        b"",
        b'{"id": "d", "subject": "caf\xe9"}',
        b'["not", "an", "object"]',
        b'{"id": "e", "subject": "x", "count": Infinity}',
        b'{"id": "f", "subject": "x"',
        b'{"id": "g", "count": 2}',
        b'{"id": "h", "subject": "ok", "count": 2.0}',
    ]
    path.write_bytes(b"\n".join(lines) + b"\n")
    got = rows(path, id_column="id")
    errors = [r.error for r in got]
    assert got[0].inputs == {"subject": "bom first line", "count": 1}
    assert errors[1] == "in.jsonl row 2: NaN is not valid JSON (use null for a missing number)"
    assert errors[2] == "in.jsonl row 3: duplicate key 'subject' in a JSON object"
    assert errors[3] == "in.jsonl row 4 (line 5): invalid UTF-8 at byte 27 of the line"
    assert errors[4] == "in.jsonl row 5 (line 6): expected a JSON object, got list"
    assert errors[5].startswith("in.jsonl row 6 (line 7): Infinity is not valid JSON")
    assert errors[6].startswith("in.jsonl row 7 (line 8): invalid JSON:")
    assert errors[7] == "in.jsonl row 8 (line 9) (id 'g'): column 'subject': a value is required, but it is missing"
    assert got[8].inputs == {"subject": "ok", "count": 2}
    assert len(got) == 9


def test_parquet_typed_values_and_nan(tmp_path: Path) -> None:
    path = tmp_path / "in.parquet"
    frame = pd.DataFrame({"id": [10, 11, 12], "subject": ["a", "b", "c"], "count": [1.0, float("nan"), 2.5]})
    frame.to_parquet(path)
    got = rows(path, id_column="id")
    assert [r.id for r in got] == ["10", "11", "12"]
    assert got[0].inputs == {"subject": "a", "count": 1}
    assert got[1].inputs == {"subject": "b", "count": 1}  # NaN is empty: the default applies
    assert got[2].error == "in.parquet row 3 (id '12'): column 'count': expected an integer, got 2.5"


def test_parquet_dates(tmp_path: Path) -> None:
    path = tmp_path / "d.parquet"
    frame = pd.DataFrame({"day": pd.to_datetime(["2024-01-02 00:00", "2024-01-03 10:00"], format="ISO8601")})
    frame.to_parquet(path)
    got = rows(path, specs=(InputSpec("day", "date"),))
    assert got[0].inputs == {"day": "2024-01-02"}
    assert "expected a date without a time of day" in (got[1].error or "")


def test_format_detection_and_explicit_format(tmp_path: Path) -> None:
    path = tmp_path / "rows.txt"
    path.write_text(json.dumps({"subject": "x"}) + "\n", encoding="utf-8")
    with pytest.raises(UsageError, match="pass --format"):
        InputSource.open(path)
    assert rows(path, format="jsonl")[0].inputs == {"subject": "x", "count": 1}
    with pytest.raises(UsageError, match="unknown input format 'xml'"):
        InputSource.open(path, format="xml")
    with pytest.raises(InputError, match="no such input file"):
        InputSource.open(tmp_path / "absent.csv")


def test_parse_mapping() -> None:
    assert parse_mapping(["subject=title", " count = n "], SPECS) == {"subject": "title", "count": "n"}
    with pytest.raises(UsageError, match="expected INPUT=COLUMN"):
        parse_mapping(["subject"], SPECS)
    with pytest.raises(UsageError, match="the task has no input 'subj'"):
        parse_mapping(["subj=title"], SPECS)
    with pytest.raises(UsageError, match="mapped twice"):
        parse_mapping(["subject=a", "subject=b"], SPECS)


def test_sample_tickets_are_all_valid() -> None:
    sample = Path(__file__).parents[2] / "examples" / "batch" / "tickets.csv"
    specs = (
        InputSpec("subject", "string"),
        InputSpec("body", "string"),
        InputSpec("product", "string"),
        InputSpec("priority", "string", enum=("low", "normal", "high", "urgent")),
        InputSpec("created_on", "date"),
    )
    got = list(read_rows(InputSource.open(sample, id_column="id"), specs))
    assert len(got) >= 1000 and all(r.valid for r in got)
    assert sample.stat().st_size < 400_000
