"""The batch journal: ingest, metadata checks, exactly-once recording, resume."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from runner.batch.inputs import file_sha256
from runner.batch.journal import BatchJournal, RowOutcome
from runner.core.usage import Usage
from runner.errors import UsageError
from tests.batch.batch_fakes import rows_of, tickets, write_csv


def test_ingest_records_every_row_once_and_is_idempotent(make_batch) -> None:
    data = tickets(5)
    data.append({"id": "T0001", "subject": "dup", "priority": "high"})
    source, journal = make_batch(data)
    assert journal.ingest(rows_of(source)) == 6
    assert journal.ingest(rows_of(source)) == 6  # re-ingest after a crash in the middle: no duplicates
    assert journal.counts() == {"pending": 5, "running": 0, "done": 0, "failed": 0, "invalid": 1, "not_run": 0}
    invalid = journal.row(6)
    assert invalid is not None and invalid.error_kind == "input" and "duplicate id" in (invalid.error or "")
    assert journal.ingested


def test_wal_mode(make_batch) -> None:
    _, journal = make_batch(tickets(1))
    with sqlite3.connect(journal.path) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    db.close()


def test_result_and_done_mark_are_recorded_once(make_batch) -> None:
    source, journal = make_batch(tickets(2))
    journal.ingest(rows_of(source))
    assert journal.mark_running(1, "run-1") == 1
    assert journal.record(1, RowOutcome("done", output={"a": 1}, usage=Usage(3, 4, cost_usd=0.5)))
    assert not journal.record(1, RowOutcome("done", output={"a": 2}, usage=Usage(cost_usd=0.5)))  # not running: refused
    row = journal.row(1)
    assert row is not None
    assert (row.status, row.output, row.usage.cost_usd, row.usage.total_tokens, row.attempts) == ("done", {"a": 1}, 0.5, 7, 1)
    assert [r.number for r in journal.todo(max_attempts=2)] == [2]


def test_resume_turns_running_into_failed_and_requeues_not_run(make_batch, tmp_path: Path) -> None:
    source, journal = make_batch(tickets(4))
    journal.ingest(rows_of(source))
    journal.mark_running(1, "r1")  # the process "dies" with row 1 running
    journal.mark_running(2, "r2")
    journal.record(2, RowOutcome("failed", error="boom", error_kind="server_error", usage=Usage(cost_usd=0.25)))
    journal.mark_running(3, "r3")
    journal.record(3, RowOutcome("done", output=1, usage=Usage(cost_usd=0.5)))
    journal.mark_not_run("batch cap max_cost_usd=1 reached", "max_cost_usd")
    journal.close()

    _, again = make_batch()
    state = again.prepare_resume()
    assert (state.interrupted, state.requeued) == (1, 1)
    row1 = again.row(1)
    assert row1 is not None and (row1.status, row1.error_kind, row1.attempts) == ("failed", "interrupted", 1)
    assert [r.number for r in again.todo(max_attempts=2)] == [1, 2, 4]
    assert [r.number for r in again.todo(max_attempts=1)] == [4]  # attempts used up
    assert again.spent().cost_usd == pytest.approx(0.75)


def test_a_different_task_or_input_is_refused_until_restart(make_batch, tmp_path: Path) -> None:
    source, journal = make_batch(tickets(2))
    batch_id = journal.batch_id
    journal.close()
    write_csv(source.path, tickets(3))  # the input changed
    with pytest.raises(UsageError) as caught:
        make_batch()
    message = str(caught.value)
    assert "belongs to another batch (input_sha256 differ)" in message and "--restart" in message
    with pytest.raises(UsageError, match=r"task, input_sha256 differ"):
        BatchJournal.open(
            tmp_path / "journal.sqlite3",
            task="other",
            input_path=source.path,
            input_sha256=file_sha256(source.path),
            options=source.options(),
        ).close()
    _, fresh = make_batch(restart=True)
    assert fresh.batch_id != batch_id and not fresh.ingested


def test_a_second_process_on_the_same_journal_is_refused(make_batch) -> None:
    source, journal = make_batch(tickets(1))
    with pytest.raises(UsageError, match="another batch process is using this journal"):
        BatchJournal.open(
            journal.path,
            task="triage",
            input_path=source.path,
            input_sha256=file_sha256(source.path),
            options=source.options(),
        )


def test_todo_pages_through_large_journals(make_batch) -> None:
    source, journal = make_batch(tickets(1000))
    journal.ingest(rows_of(source), chunk_rows=64)
    numbers = [r.number for r in journal.todo(max_attempts=1, page_rows=7)]
    assert numbers == list(range(1, 1001))
