"""The output file (JSONL, CSV, Parquet) and the batch report, read back."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pandas as pd
import pytest

from runner.batch.engine import batch_budget, run_batch
from runner.batch.output import COLUMNS, escape_formula, write_output
from runner.batch.progress import BarProgress, LogProgress, make_progress
from runner.batch.summary import batch_report, render_markdown, write_reports
from runner.config.specs import Caps
from runner.errors import UsageError
from tests.batch.batch_fakes import FakeExecutor, rows_of, tickets

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def finished(make_batch):
    """A journal with done, failed, invalid and formula-looking rows."""
    data = tickets(6)
    data[0]["subject"] = '=HYPERLINK("http://evil")'
    data[1]["id"] = "@T2"
    data[2]["priority"] = "urgent"  # invalid
    source, journal = make_batch(data)
    executor = FakeExecutor(cost_per_call=0.01, tokens_per_call=(7, 3), fail={"subject 4": ["timeout", "timeout"]})
    summary = await run_batch(rows_of(source), executor, journal=journal, budget=batch_budget(Caps()), concurrency=2)
    return journal, summary


@pytest.mark.parametrize("suffix", [".jsonl", ".csv", ".parquet"])
async def test_output_round_trips_in_input_order(finished, tmp_path: Path, suffix: str) -> None:
    journal, _ = finished
    path = tmp_path / f"out{suffix}"
    assert write_output(journal, path) == 6
    if suffix == ".jsonl":
        records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        frame = pd.DataFrame(records)
        outputs = [r["output"] for r in records]
    else:  # CSV and Parquet: each field of the answer in its own column
        frame = pd.read_csv(path, dtype=object, keep_default_na=False) if suffix == ".csv" else pd.read_parquet(path)
        outputs = [{"subject": s} if isinstance(s, str) and s else None for s in frame["output.subject"]]
    columns = list(COLUMNS) if suffix == ".jsonl" else [c for c in COLUMNS if c != "output"]
    if suffix != ".jsonl":
        columns.insert(columns.index("cost_usd"), "output.subject")
    assert list(frame.columns) == columns
    assert [int(r) for r in frame["row"]] == [1, 2, 3, 4, 5, 6]
    assert list(frame["status"]) == ["done", "done", "invalid", "failed", "done", "done"]
    assert outputs[4] == {"subject": "SUBJECT 5"} and outputs[2] is None
    assert float(frame["cost_usd"][3]) == pytest.approx(0.02)  # two attempts
    assert int(frame["tokens"][0]) == 10
    assert not list(tmp_path.glob(".out*"))  # no temp file left behind


async def test_csv_cells_are_escaped_against_formulas(finished, tmp_path: Path) -> None:
    journal, _ = finished
    path = tmp_path / "out.csv"
    write_output(journal, path)
    with path.open(encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert rows[1]["id"] == "'@T2"
    assert rows[0]["output.subject"] == '\'=HYPERLINK("HTTP://EVIL")'  # an answer's field in its own cell, escaped
    for value, expected in [("=1+1", "'=1+1"), ("+1", "'+1"), ("-2", "'-2"), ("@SUM(A1)", "'@SUM(A1)"),
                            ("\tx", "'\tx"), ("\rx", "'\rx"), ("fine", "fine"), (-2, -2), (None, None)]:  # fmt: skip
        assert escape_formula(value) == expected


async def test_a_failed_write_keeps_the_old_file(finished, tmp_path: Path) -> None:
    journal, _ = finished
    path = tmp_path / "out.jsonl"
    path.write_text("previous\n", encoding="utf-8")
    with pytest.raises(UsageError):
        write_output(journal, tmp_path / "out.xlsx")
    journal.close()  # reading a closed journal fails mid-write
    with pytest.raises(Exception):  # noqa: B017 (sqlite3.ProgrammingError)
        write_output(journal, path)
    assert path.read_text(encoding="utf-8") == "previous\n"


async def test_batch_report(finished, tmp_path: Path) -> None:
    journal, summary = finished
    report = batch_report(journal, summary)
    assert report["counts"]["done"] == 4 and report["counts"]["failed"] == 1 and report["counts"]["invalid"] == 1
    assert report["cost_usd"] == pytest.approx(0.06)
    cost = report["cost_per_row_usd"]
    assert cost["rows"] == 5 and cost["max"] == pytest.approx(0.02) and cost["p50"] == pytest.approx(0.01)
    assert report["errors_by_kind"]["timeout"]["example_ids"] == ["T0004"]
    assert report["errors_by_kind"]["input"]["count"] == 1
    assert len(report["slowest_rows"]) == 5
    markdown, data = write_reports(report, tmp_path / "report")
    text = markdown.read_text(encoding="utf-8")
    assert "| done | 4 |" in text and "## Errors by kind" in text and "T0004" in text
    assert json.loads(data.read_text(encoding="utf-8"))["run"]["exit_code"] == 1
    assert render_markdown(report) == text


async def test_report_lists_rows_not_run_and_why(make_batch) -> None:
    source, journal = make_batch(tickets(5))
    budget = batch_budget(Caps(max_cost_usd=0.02))
    await run_batch(rows_of(source), FakeExecutor(cost_per_call=0.01), journal=journal, budget=budget)
    report = batch_report(journal)
    (reason,) = report["not_run"]
    assert reason.startswith("batch cap max_cost_usd=0.02 reached") and report["not_run"][reason]["count"] == 3
    assert "## Rows not run" in render_markdown(report)


def test_progress_renderings(tmp_path: Path) -> None:
    now = [0.0]
    log_file = (tmp_path / "log.txt").open("w+", encoding="utf-8")
    with log_file:
        progress = LogProgress(log_file, interval=10, clock=lambda: now[0])
        progress.start(total=100, already_finished=20)
        for i in range(10):
            now[0] += 1
            progress.row_finished("done", 0.5 * (i + 1))
        progress.row_finished("retrying", 5.25)  # not finished: it will be retried
        progress.close()
        log_file.seek(0)
        lines = log_file.read().splitlines()
    assert lines[0].startswith("batch: 20/100 rows (20.0%)")
    assert lines[1] == "batch: 30/100 rows (30.0%), 0 failed, $5.0000 spent, 1.00 rows/s, ETA 1m10s"
    assert lines[-1].startswith("batch: 30/100 rows") and "$5.2500 spent" in lines[-1]
    assert isinstance(make_progress(io.StringIO()), LogProgress)

    class Terminal:
        def __init__(self) -> None:
            self.text = ""

        def isatty(self) -> bool:
            return True

        def write(self, text: str) -> None:
            self.text += text

        def flush(self) -> None:
            pass

    terminal = Terminal()
    bar = make_progress(terminal)  # type: ignore[arg-type]
    assert isinstance(bar, BarProgress)
    bar.start(10, 0)
    bar.row_finished("done", 0.125)
    bar.close()
    assert "1/10" in terminal.text and "spend=$0.1250" in terminal.text
