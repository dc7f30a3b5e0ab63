"""The batch journal on both backends (an SQLite file, PostgreSQL): ingest, metadata checks,
exactly-once recording, resume, one process at a time."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from runner.batch.inputs import file_sha256
from runner.batch.journal import BatchJournal, RowOutcome
from runner.batch.journal_open import batch_journal_exists, open_batch_journal
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


def test_wal_mode(make_batch, backend: str) -> None:
    if backend != "sqlite":
        pytest.skip("WAL is the SQLite file's mode")
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


def test_unfinished_records_are_every_row_not_done_in_input_order(make_batch) -> None:
    source, journal = make_batch(tickets(5))
    journal.ingest(rows_of(source))
    for number, status in ((1, "done"), (2, "failed"), (4, "done")):
        journal.mark_running(number, f"run-{number}")
        journal.record(number, RowOutcome(status, error=None if status == "done" else "boom", error_kind="bad_request"))
    unfinished = [(r.number, r.status) for r in journal.records(unfinished_only=True, page_rows=2)]
    assert unfinished == [(2, "failed"), (3, "pending"), (5, "pending")]
    assert [r.number for r in journal.records(page_rows=2)] == [1, 2, 3, 4, 5]


def test_reasoning_and_cache_write_tokens_are_kept_summed_and_corrected(make_batch) -> None:
    source, journal = make_batch(tickets(2))
    journal.ingest(rows_of(source))
    for number in (1, 2):
        journal.mark_running(number, f"run-{number}")
        journal.record(number, RowOutcome("done", usage=Usage(10, 20, 0, 0.1, 1, reasoning_tokens=15, cache_write_tokens=4)))
    row = journal.row(1)
    assert row is not None and (row.usage.reasoning_tokens, row.usage.cache_write_tokens) == (15, 4)
    assert (journal.spent().reasoning_tokens, journal.spent().cache_write_tokens) == (30, 8)
    journal.correct_usage(2, Usage(10, 30, reasoning_tokens=25))
    assert journal.spent().reasoning_tokens == 40 and [r.usage.cache_write_tokens for r in journal.records()] == [4, 0]


def test_a_journal_from_before_reasoning_tokens_were_kept_gains_their_columns(make_batch, tmp_path: Path, journal_url: str | None) -> None:
    if journal_url is not None:
        pytest.skip("the SQLite file's own tables: PostgreSQL's shared ones are made once")
    source, journal = make_batch(tickets(1))
    journal.ingest(rows_of(source))
    journal.close()
    db = sqlite3.connect(tmp_path / "journal.sqlite3")
    for column in ("reasoning_tokens", "cache_write_tokens"):
        db.execute(f"ALTER TABLE rows DROP COLUMN {column}")
    db.commit()
    db.close()
    _, reopened = make_batch()
    reopened.mark_running(1, "run-1")
    reopened.record(1, RowOutcome("done", usage=Usage(10, 20, reasoning_tokens=15)))
    assert reopened.spent().reasoning_tokens == 15


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


def test_a_different_task_or_input_is_refused_until_restart(make_batch, tmp_path: Path, journal_url: str | None) -> None:
    source, journal = make_batch(tickets(2))
    batch_id = journal.batch_id
    journal.close()
    write_csv(source.path, tickets(3))  # the input changed
    with pytest.raises(UsageError) as caught:
        make_batch()
    message = str(caught.value)
    assert "belongs to another batch (input_sha256 differ)" in message and "--restart" in message
    with pytest.raises(UsageError, match=r"task, input_sha256 differ"):
        open_batch_journal(
            tmp_path / "journal.sqlite3",
            task="other",
            input_path=source.path,
            input_sha256=file_sha256(source.path),
            options=source.options(),
            database_url=journal_url,
        ).close()
    _, fresh = make_batch(restart=True)
    assert fresh.batch_id != batch_id and not fresh.ingested


def test_a_second_process_on_the_same_journal_is_refused(make_batch, journal_url: str | None) -> None:
    source, journal = make_batch(tickets(1))
    with pytest.raises(UsageError, match="another batch process is using this journal"):
        open_batch_journal(
            journal.path,
            task="triage",
            input_path=source.path,
            input_sha256=file_sha256(source.path),
            options=source.options(),
            database_url=journal_url,
        )
    journal.close()  # the lock goes with it
    reopened = open_batch_journal(
        journal.path, task="triage", input_path=source.path, input_sha256=file_sha256(source.path),
        options=source.options(), database_url=journal_url,
    )  # fmt: skip
    reopened.close()


def test_todo_pages_through_large_journals(make_batch) -> None:
    source, journal = make_batch(tickets(1000))
    journal.ingest(rows_of(source), chunk_rows=64)
    numbers = [r.number for r in journal.todo(max_attempts=1, page_rows=7)]
    assert numbers == list(range(1, 1001))


HOLDER = """
import sys, time
from pathlib import Path
from runner.batch.journal import BatchJournal
from runner.batch.journal_open import batch_journal_exists, open_batch_journal
journal = open_batch_journal(Path(sys.argv[1]), task="triage", input_path=Path(sys.argv[2]), input_sha256=sys.argv[3],
                            options={"id_column": "id"}, database_url=sys.argv[4] if len(sys.argv) > 4 else None)
print("locked", flush=True)
time.sleep(600)
"""


def test_a_journal_held_by_a_killed_process_is_free_again(tmp_path: Path, journal_url: str | None) -> None:
    data = write_csv(tmp_path / "in.csv", tickets(2))
    path = tmp_path / "journal.sqlite3"
    argv = [sys.executable, "-c", HOLDER, str(path), str(data), file_sha256(data), *([journal_url] if journal_url else [])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    holder = subprocess.Popen(argv, stdout=subprocess.PIPE, env=env)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == b"locked"

        def reopen() -> BatchJournal:
            return open_batch_journal(path, task="triage", input_path=data, input_sha256=file_sha256(data),
                                     options={"id_column": "id"}, database_url=journal_url)  # fmt: skip

        with pytest.raises(UsageError, match="another batch process is using this journal") as refused:
            reopen()
        if journal_url:
            assert f"pid {holder.pid}" in str(refused.value)  # names the session that holds it
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
        holder.stdout.close()  # type: ignore[union-attr]
    reopen().close()  # the kernel dropped the flock / PostgreSQL ended the session and its advisory lock


def test_hostile_text_is_kept(make_batch) -> None:
    source, journal = make_batch([{"id": "T\u00e9", "subject": "x", "priority": "low"}])
    journal.ingest(rows_of(source))
    journal.mark_running(1, "r")
    assert journal.record(1, RowOutcome("failed", error="nul\x00 and \udcff", error_kind="server_error"))
    row = journal.row(1)
    assert row is not None and row.id == "T\u00e9"
    assert row.error is not None and row.error.startswith("nul") and row.error.endswith("and \\udcff")


def test_journals_in_one_database_are_apart(tmp_path: Path, journal_url: str | None) -> None:
    data = write_csv(tmp_path / "in.csv", tickets(3))
    first = open_batch_journal(tmp_path / "a.sqlite3", task="triage", input_path=data, input_sha256=file_sha256(data),
                              database_url=journal_url)  # fmt: skip
    second = open_batch_journal(tmp_path / "b.sqlite3", task="triage", input_path=data, input_sha256=file_sha256(data),
                               database_url=journal_url)  # fmt: skip
    with first, second:
        from runner.batch.inputs import InputSource

        first.ingest(rows_of(InputSource.open(data, id_column="id")))
        first.mark_running(1, "r")
        first.record(1, RowOutcome("done", output=1, usage=Usage(cost_usd=0.5)))
        assert second.counts()["done"] == 0 and not second.ingested and second.spent() == Usage()
        assert first.batch_id != second.batch_id and first.spent().cost_usd == 0.5


def test_a_journal_exists_once_it_was_opened(tmp_path: Path, journal_url: str | None) -> None:
    data = write_csv(tmp_path / "in.csv", tickets(1))
    path = tmp_path / "never.sqlite3"
    assert not batch_journal_exists(path, database_url=journal_url)
    open_batch_journal(path, task="triage", input_path=data, input_sha256=file_sha256(data), database_url=journal_url).close()
    assert batch_journal_exists(path, database_url=journal_url)
    assert not batch_journal_exists(tmp_path / "other.sqlite3", database_url=journal_url)


def test_the_provider_state_survives_reopening_and_restart_forgets_it(make_batch) -> None:
    from runner.batch.provider_state import BatchPart, ProviderState

    source, journal = make_batch(tickets(2))
    journal.ingest(rows_of(source))
    state = ProviderState(journal)
    assert (state.rounds, state.intents, state.out) == (0, [], [])
    first = state.intend(BatchPart(state.next_round(), 1, "gpt-4o-mini", "https://api.openai.com/v1"))
    second = state.intend(BatchPart(state.rounds, 2, "gpt-4o-mini", "https://api.openai.com/v1"))
    state.created(first, "batch_abc")
    journal.close()  # as a killed process would leave it: one batch out, one about to be created
    _, reopened = make_batch()
    state = ProviderState(reopened)
    assert state.rounds == 1 and state.out_ids == ("batch_abc",) and [i.key for i in state.intents] == ["1.2"]
    assert state.intents[0] == second and second.metadata("b") == {"runner_batch_id": "b", "runner_round": "1", "runner_part": "2"}
    state.dropped(second)
    state.collected("batch_abc")
    reopened.close()
    _, again = make_batch()
    state = ProviderState(again)
    assert (state.rounds, state.intents, state.out) == (1, [], [])
    again.close()
    _, fresh = make_batch(restart=True)
    assert ProviderState(fresh).rounds == 0
