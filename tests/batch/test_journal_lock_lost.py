"""A PostgreSQL journal's lock lost while its batch runs: the session was ended (an
administrator's ``pg_terminate_backend``, a dropped connection, a server restart) and another
batch process took the journal meanwhile. The first process stops with
:class:`JournalLockLost` (exit 2) at its next statement, whether the other one still holds the
journal or has ended, and every later write is refused the same way. When nobody took the
journal in between, the lock is simply taken again."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from runner.batch.inputs import InputSource, file_sha256
from runner.batch.journal import BatchJournal, RowOutcome
from runner.batch.journal_open import open_batch_journal
from runner.batch.journal_postgres import PostgresJournal
from runner.errors import EXIT_CONFIG, JournalLockLost, UsageError
from tests.batch.batch_fakes import rows_of, tickets, write_csv
from tests.postgres import terminate

pytestmark = pytest.mark.timeout(120)
Opener = Callable[[], BatchJournal]


@pytest.fixture
def open_journal(tmp_path: Path, postgres_url: str) -> Iterator[Opener]:
    data = write_csv(tmp_path / "in.csv", tickets(3))
    opened: list[BatchJournal] = []

    def opener() -> BatchJournal:
        journal = open_batch_journal(tmp_path / "j.sqlite3", task="triage", input_path=data, input_sha256=file_sha256(data),
                                    options={"id_column": "id"}, database_url=postgres_url)  # fmt: skip
        opened.append(journal)
        return journal

    yield opener
    for journal in opened:
        journal.close()


@pytest.fixture
def first(open_journal: Opener, tmp_path: Path) -> BatchJournal:
    journal = open_journal()
    journal.ingest(rows_of(InputSource.open(tmp_path / "in.csv", id_column="id")))
    return journal


def session(journal: BatchJournal) -> int:
    assert isinstance(journal, PostgresJournal)
    return journal._postgres.session_pid


def die(journal: BatchJournal, url: str) -> None:
    """End ``journal``'s process as ``kill -9`` would: its session ends, it never closes (its row stays)."""
    assert isinstance(journal, PostgresJournal)
    terminate(url, session(journal))
    journal._open = False
    journal._postgres.close()  # only the client's socket: nothing more is sent


def holders(url: str) -> list[tuple[str, str]]:
    with psycopg.connect(url, autocommit=True) as db:
        return [(str(r[0]), str(r[1])) for r in db.execute("SELECT journal, holder FROM journal_holders").fetchall()]


def test_a_journal_held_now_by_another_process_stops_this_one_for_good(
    first: BatchJournal, open_journal: Opener, postgres_url: str
) -> None:
    terminate(postgres_url, session(first))
    second = open_journal()
    with pytest.raises(JournalLockLost) as lost:
        first.mark_running(1, "r")
    message = str(lost.value)
    assert "another batch process took this journal (session" in message and "holds it now" in message
    assert "Run the same command again" in message and lost.value.exit_code == EXIT_CONFIG
    for write in (lambda: first.mark_running(2, "r"), lambda: first.record(1, RowOutcome("done", output={})),
                  lambda: first.mark_not_run("stop", "stopped"), first.prepare_resume):  # fmt: skip
        with pytest.raises(JournalLockLost):
            write()
    with pytest.raises(JournalLockLost):
        first.counts()  # reads too: this process has no journal any more
    assert second.mark_running(1, "r") == 1  # the other process's journal is untouched
    assert second.row(1).status == "running"  # type: ignore[union-attr]
    first.close()  # no error, and the other holder's row stays
    assert [h for _, h in holders(postgres_url)] == [second.holder]  # type: ignore[attr-defined]


def test_a_journal_taken_meanwhile_by_a_process_that_has_ended_stops_this_one(
    first: BatchJournal, open_journal: Opener, postgres_url: str
) -> None:
    terminate(postgres_url, session(first))
    second = open_journal()
    second.prepare_resume()
    second.close()  # it ran and ended: the lock is free again
    with pytest.raises(JournalLockLost, match="took this journal meanwhile and has ended") as lost:
        first.record(1, RowOutcome("done", output={}))
    assert lost.value.exit_code == EXIT_CONFIG
    with pytest.raises(JournalLockLost):
        first.mark_running(1, "r")  # still lost, although the lock is free
    third = open_journal()  # this process holds no lock after its refusal: the next batch gets the journal
    assert third.mark_running(1, "r") == 1


def test_a_journal_taken_meanwhile_by_a_process_that_died_names_it(
    first: BatchJournal, open_journal: Opener, postgres_url: str
) -> None:
    terminate(postgres_url, session(first))
    second = open_journal()
    die(second, postgres_url)  # its row is still there
    with pytest.raises(JournalLockLost, match=r"another batch process \(pid \d+, host .+\) took this journal meanwhile"):
        first.counts()


def test_a_journal_nobody_took_is_locked_again_after_the_session_ended(
    first: BatchJournal, open_journal: Opener, postgres_url: str
) -> None:
    terminate(postgres_url, session(first))
    assert first.mark_running(1, "r") == 1  # reconnected, the lock taken again
    with pytest.raises(UsageError, match="another batch process is using this journal") as refused:
        open_journal()
    assert not isinstance(refused.value, JournalLockLost)
    terminate(postgres_url, session(first))  # twice: still this process's
    assert first.record(1, RowOutcome("done", output={"ok": 1}))


def test_a_server_restart_with_nobody_else_waiting_keeps_the_journal(
    first: BatchJournal, open_journal: Opener, postgres_cluster: Any
) -> None:
    postgres_cluster.restart()  # every session ends
    assert first.mark_running(1, "r") == 1
    with pytest.raises(UsageError, match="another batch process is using this journal"):
        open_journal()


def test_a_holder_row_left_by_a_dead_process_does_not_block_the_next_one(
    first: BatchJournal, open_journal: Opener, postgres_url: str
) -> None:
    die(first, postgres_url)
    second = open_journal()  # the lock is free: taken, and the row now names this process
    assert second.prepare_resume().interrupted == 0
    assert [h for _, h in holders(postgres_url)] == [second.holder]  # type: ignore[attr-defined]
    second.close()
    assert holders(postgres_url) == []  # its own row goes with it


def test_closing_a_journal_releases_it_for_the_next_process(first: BatchJournal, open_journal: Opener) -> None:
    with pytest.raises(UsageError, match="another batch process is using this journal"):
        open_journal()
    first.close()
    assert open_journal().counts()["pending"] == 3
