"""`runner batch` over damaged input files: a bad line is that row's error, the other rows run.

Only a file unreadable as a whole (empty, no header, binary, UTF-16) refuses the batch (exit 2,
no row run). Every case goes through the real CLI against the loopback server, which counts
the rows that reached the model.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from runner.batch.csvfile import MAX_LINE_CHARS
from runner.model.server import ScriptedServer
from tests.support.project import run_cli, write_project

PROJECT = {
    "agents.d/echo.yaml": "apiVersion: runner/v1\nkind: Agent\nname: echo\nmodel: {id: gpt-4o-mini}\nsystem_prompt: Echo.\n",
    "tasks.d/ask.yaml": (
        "apiVersion: runner/v1\nkind: Task\nname: ask\ninputs: {q: {type: string}, n: {type: integer, default: 0}}\n"
        'agent: echo\ngoal: "{{ inputs.q }} {{ inputs.n }}"\n'
    ),
}


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer({"fallback": "fine"}) as srv:
        yield srv


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return write_project(tmp_path, PROJECT)


def batch(root: Path, server: ScriptedServer, source: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return run_cli(root, server, "batch", "ask", "--input", str(source), "--output", "out.jsonl", "--progress", "none",
                   *extra, key="sk-test-rows")  # fmt: skip


def output(root: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in (root / "out.jsonl").read_text().splitlines()]


def by_status(records: list[dict[str, object]]) -> dict[str, list[int]]:
    found: dict[str, list[int]] = {}
    for record in records:
        found.setdefault(str(record["status"]), []).append(int(record["row"]))  # type: ignore[call-overload]
    return found


def assert_row_errors(result: subprocess.CompletedProcess[str], root: Path, bad: dict[int, str], total: int) -> None:
    """Exit 1 (a batch with invalid rows), one record per row, each bad row's error names it."""
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    records = output(root)
    assert [r["row"] for r in records] == list(range(1, total + 1))
    assert by_status(records) == {"done": [n for n in range(1, total + 1) if n not in bad], "invalid": sorted(bad)}
    for record in records:
        if record["row"] in bad:
            assert f"row {record['row']}" in str(record["error"]), record
            assert bad[int(record["row"])] in str(record["error"]), record  # type: ignore[call-overload]


# --- CSV: one bad line, the rest runs --------------------------------------------------------

CSV_CASES = {
    "extra field": (b"id,q\n1,a\n2,b,EXTRA\n3,c\n", {2: "line 3 has 3 fields, the header has 2"}, 3),
    "missing field": (b"id,q,n\n1,a,1\n2,b\n3,c,3\n", {2: "line 3 has 2 fields, the header has 3"}, 3),
    "unterminated quote mid-file": (b'id,q\n1,a\n2,"never closed\n3,c\n4,d\n', {2: "starting on line 3"}, 4),
    "text after a closing quote": (b'id,q\n1,"a"x\n2,b\n', {1: "starting on line 2"}, 2),
    "quote swallowing a later quote": (b'id,q\n1,"open\n2,b\n3,"c"\n4,d\n', {1: "starting on line 2"}, 4),
    "NUL byte": (b"id,q\n1,a\x00b\n2,b\n", {1: "NUL byte in column 'q'"}, 2),
    "invalid UTF-8 on one line": (b"id,q\n1,caf\xe9\n2,b\n", {1: "invalid UTF-8 in column 'q'"}, 2),
    "bad value type": (b"id,q,n\n1,a,one\n2,b,2\n", {1: "column 'n': expected an integer"}, 2),
}


@pytest.mark.parametrize("case", CSV_CASES, ids=list(CSV_CASES))
def test_one_bad_csv_line_is_that_rows_error(root: Path, server: ScriptedServer, case: str) -> None:
    data, bad, total = CSV_CASES[case]
    source = root / "rows.csv"
    source.write_bytes(data)
    result = batch(root, server, source, "--id-column", "id")
    assert_row_errors(result, root, bad, total)
    assert len(server.requests) == total - len(bad)


def test_an_overlong_line_is_a_row_error_and_never_read_whole(root: Path, server: ScriptedServer) -> None:
    source = root / "rows.csv"
    with source.open("wb") as out:
        out.write(b"id,q\n1,a\n2,")
        out.write(b"x" * (MAX_LINE_CHARS + 10))
        out.write(b"\n3,c\n")
    result = batch(root, server, source, "--id-column", "id")
    assert_row_errors(result, root, {2: "line 3 is longer than"}, 3)


def test_multi_line_quoted_values_and_crlf_stay_valid(root: Path, server: ScriptedServer) -> None:
    source = root / "rows.csv"
    source.write_bytes(b'id,q\r\n1,"two\r\nlines"\r\n\r\n2,"say ""hi"", twice"\r\n3,plain\r\n')
    result = batch(root, server, source, "--id-column", "id")
    assert result.returncode == 0, result.stderr
    assert [r["status"] for r in output(root)] == ["done"] * 3


def test_a_resumed_batch_keeps_the_same_row_errors(root: Path, server: ScriptedServer) -> None:
    source = root / "rows.csv"
    source.write_bytes(b'id,q\n1,a\n2,"open\n3,c\n')
    first = batch(root, server, source, "--id-column", "id")
    assert first.returncode == 1, first.stderr
    calls = len(server.requests)
    again = batch(root, server, source, "--id-column", "id")
    assert again.returncode == 1, again.stderr
    assert len(server.requests) == calls  # nothing ran twice
    assert by_status(output(root)) == {"done": [1, 3], "invalid": [2]}


# --- files unreadable as a whole: exit 2, nothing run ----------------------------------------

WHOLE_FILE = {
    "empty.csv": (b"", "empty"),
    "blank-header.csv": (b"\n1,a\n", "empty"),
    "binary.csv": (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00", "not a UTF-8 CSV"),
    "utf16.csv": ("id,q\n1,a\n".encode("utf-16"), "not a UTF-8 CSV"),
    "malformed-header.csv": (b'id,"q\n1,a\n', "header row is malformed"),
    "binary.jsonl": (b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03{}", "not a UTF-8 JSON Lines"),
    "utf16.jsonl": ('{"id": 1, "q": "a"}\n'.encode("utf-16"), "not a UTF-8 JSON Lines"),
    "garbage.parquet": (b"PAR1 this is not parquet", "not a readable Parquet file"),
}


@pytest.mark.parametrize("name", WHOLE_FILE, ids=list(WHOLE_FILE))
def test_a_file_unreadable_as_a_whole_refuses_the_batch(root: Path, server: ScriptedServer, name: str) -> None:
    data, words = WHOLE_FILE[name]
    source = root / name
    source.write_bytes(data)
    result = batch(root, server, source)
    assert result.returncode == 2, result.stderr
    assert words in result.stderr and name in result.stderr
    assert "Traceback" not in result.stderr
    assert server.requests == [] and not (root / "out.jsonl").exists()


# --- JSONL and Parquet neighbours -------------------------------------------------------------


def test_jsonl_values_python_cannot_hold_are_row_errors(root: Path, server: ScriptedServer) -> None:
    lines = [
        b'{"id": 1, "q": "fine"}',
        b'{"id": 2, "q": "x", "n": 1e400}',
        b'{"id": 3, "q": "x", "n": ' + b"9" * 5000 + b"}",
        b'{"id": 4, "q": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        b'{"id": 5, "q": "a\x00b"}',
        b'{"id": 6, "q": "fine"}',
    ]
    source = root / "rows.jsonl"
    source.write_bytes(b"\n".join(lines) + b"\n")
    result = batch(root, server, source, "--id-column", "id")
    bad = {2: "out of range", 3: "invalid JSON value", 4: "nested more than 64 levels", 5: "invalid JSON"}
    assert_row_errors(result, root, bad, 6)


def test_jsonl_overlong_line_is_a_row_error(root: Path, server: ScriptedServer) -> None:
    from runner.batch.readers import MAX_LINE_BYTES

    source = root / "rows.jsonl"
    with source.open("wb") as out:
        out.write(b'{"id": 1, "q": "a"}\n{"id": 2, "q": "')
        out.write(b"x" * MAX_LINE_BYTES)
        out.write(b'"}\n{"id": 3, "q": "c"}\n')
    result = batch(root, server, source, "--id-column", "id")
    assert_row_errors(result, root, {2: "line 2 is longer than"}, 3)


def test_parquet_corrupt_row_group_and_unreadable_values_are_row_errors(root: Path, server: ScriptedServer) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({"id": list(range(1, 7)), "q": [f"value-{i}-" + "y" * 200 for i in range(1, 7)]})
    good = root / "good.parquet"
    pq.write_table(table, good, row_group_size=2, compression="none")
    page = pq.ParquetFile(good).metadata.row_group(1).column(1).data_page_offset
    data = bytearray(good.read_bytes())
    data[page : page + 40] = b"\xff" * 40  # the page header of rows 3-4: the whole row group is unreadable
    corrupt = root / "corrupt.parquet"
    corrupt.write_bytes(bytes(data))
    result = batch(root, server, corrupt, "--id-column", "id")
    assert_row_errors(result, root, {3: "unreadable Parquet data (row group 1)", 4: "unreadable Parquet data"}, 6)

    data = bytearray(good.read_bytes())
    at = data.index(b"value-5-")
    data[at : at + 4] = b"\xff" * 4  # one string that is not UTF-8
    (root / "value.parquet").write_bytes(bytes(data))
    (root / "out.jsonl").unlink()
    result = batch(root, server, root / "value.parquet", "--id-column", "id")
    assert_row_errors(result, root, {5: "unreadable value in column 'q'"}, 6)

    times = pa.array([0, 9 * 10**18, 5], type=pa.int64()).cast(pa.timestamp("us"))
    dated = root / "dated.parquet"
    pq.write_table(pa.table({"id": [1, 2, 3], "q": ["a", "b", "c"], "n": times}), dated)
    (root / "out.jsonl").unlink()
    result = batch(root, server, dated, "--id-column", "id")
    records = output(root)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "unreadable value in column 'n'" in str(records[1]["error"])


def test_an_input_fifo_is_refused_without_blocking(root: Path, server: ScriptedServer) -> None:
    fifo = root / "rows.csv"
    os.mkfifo(fifo)
    result = batch(root, server, fifo)
    assert result.returncode == 2, result.stderr
    assert "not a regular file" in result.stderr and server.requests == []
