"""A PostgreSQL connection that drops (the server ends the session, restarts, or the network
cuts it) under the run store, the journal and the cap ledger: reads and safe writes run again
on a new connection; a write whose commit landed but whose answer was lost is not applied
twice; a server that stays away is a clear error naming the store without its password.

Faults are real: ``pg_terminate_backend`` from another session, the test cluster stopped and
started, and a TCP proxy (tests/support/pg_fault_proxy.py) that cuts the connection right
after the server answered ``COMMIT``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from runner.batch.inputs import file_sha256
from runner.batch.journal import BatchJournal, RowOutcome
from runner.batch.journal_open import open_batch_journal
from runner.caps.budget import Budget, Estimate, Owner
from runner.caps.shared import SharedBudget
from runner.config.specs import Caps
from runner.core.calls import ModelCallEntry, ToolCallEntry
from runner.core.usage import Usage
from runner.errors import StoreUnavailable, UsageError
from runner.store.cap_ledger import CapLedger
from runner.store.postgres import RECONNECT_ENV, PostgresDatabase, Reconnect
from runner.store.provider_answers import ProviderAnswers
from runner.store.provider_tools import ProviderToolResults
from runner.store.runstore import RunStore
from tests.batch.batch_fakes import rows_of, tickets, write_csv
from tests.postgres import terminate
from tests.support.pg_fault_proxy import FaultProxy

pytestmark = pytest.mark.timeout(120)
NOW = "2026-01-01T00:00:00+00:00"


def count(url: str, sql: str, *params: Any) -> Any:
    with psycopg.connect(url, autocommit=True) as admin:
        row = admin.execute(sql, params).fetchone()
    assert row is not None
    return row[0]


@pytest.fixture
def proxy(postgres_url: str) -> Iterator[FaultProxy]:
    with FaultProxy(postgres_url) as opened:
        yield opened


# --- reads and safe writes come back -----------------------------------------------------------


def test_a_read_after_the_server_ended_the_session_runs_on_a_new_connection(postgres_url: str) -> None:
    db = PostgresDatabase(postgres_url)
    try:
        terminate(postgres_url, db.session_pid)
        assert db.rows("SELECT 1 AS one") == [{"one": 1}]
        assert db.reconnects == 1
        first = db.session_pid
        terminate(postgres_url, first)
        assert db.row("SELECT 2 AS two") == {"two": 2} and db.session_pid != first
    finally:
        db.close()


def test_the_run_store_keeps_working_across_a_server_restart(postgres_url: str, postgres_cluster: Any) -> None:
    store = RunStore(postgres_url)
    try:
        assert store.start_run("r1", "t", {"a": 1}, "h", {}) == 1
        postgres_cluster.restart()
        call_id = store.add_model_call("r1", 1, ModelCallEntry("s", "agent", "m", 1, Usage(1, 2, cost_usd=0.1), 0.1, "reserved"))
        store.settle_model_call(call_id, ModelCallEntry("s", "agent", "m", 1, Usage(1, 1, cost_usd=0.05), 0.1, "ok"))
        postgres_cluster.restart()
        assert store.spent("r1") == Usage(1, 1, 0, 0.05, 1)
        assert store.start_run("r1", "t", {"a": 1}, "h", {}) == 2
    finally:
        store.close()


def test_a_cut_inside_a_transaction_runs_the_whole_unit_again(postgres_url: str, proxy: FaultProxy) -> None:
    store = RunStore(proxy.url)
    try:
        store.start_run("r1", "t", {}, "h", {})
        proxy.cut_after("INSERT")  # the transcript entry's INSERT answered, then the line goes: nothing committed
        store.transcripts.for_run("r1", 1, ()).add_tool_call(ToolCallEntry("s", "agent", 1, "calc", "{}", "ok", 0.1, "2"), "2")
        assert proxy.cuts == 1
        assert count(postgres_url, "SELECT COUNT(*) FROM transcript_entries WHERE run_id = 'r1'") == 1
    finally:
        store.close()


# --- a commit whose answer was lost is applied once -------------------------------------------


def model_call(status: str = "reserved") -> ModelCallEntry:
    return ModelCallEntry("s", "agent", "m", 1, Usage(10, 20, cost_usd=0.5), 0.1, status)


STORE_WRITES: dict[str, tuple[Callable[[RunStore], Any], str, Any, str]] = {  # (write, query, expected, tag cut)
    "start_run (a resumed attempt)": (
        lambda s: s.start_run("r1", "t", {}, "h", {}), "SELECT attempts FROM runs WHERE run_id = 'r1'", 2, "COMMIT",
    ),
    "add_model_call": (
        lambda s: s.add_model_call("r1", 1, model_call()), "SELECT COUNT(*) FROM model_calls WHERE run_id = 'r1'", 1,
        "INSERT",
    ),
    "add_tool_call": (
        lambda s: s.add_tool_call("r1", 1, ToolCallEntry("s", "agent", 1, "calc", "{}", "ok", 0.1, "2")),
        "SELECT COUNT(*) FROM tool_calls WHERE run_id = 'r1'", 1, "INSERT",
    ),
    "add_plan": (
        lambda s: s.add_plan("r1", 1, {"steps": []}, None), "SELECT COUNT(*) FROM plans WHERE run_id = 'r1'", 1, "INSERT",
    ),
    "transcript entry": (
        lambda s: s.transcripts.for_run("r1", 1, ()).add_tool_call(ToolCallEntry("s", "agent", 1, "calc", "{}", "ok", 0.1, "2"), "2"),
        "SELECT COUNT(*) FROM transcript_entries WHERE run_id = 'r1'", 1, "COMMIT",
    ),
    "unsettled_calls": (  # a call a crash left reserved (a lone INSERT, not cut), then the marking is cut
        lambda s: (s.add_model_call("r1", 1, model_call()), s.unsettled_calls("r1")),
        "SELECT COUNT(*) FROM model_calls WHERE status = 'unsettled'", 1, "COMMIT",
    ),
}  # fmt: skip


@pytest.mark.parametrize("write", list(STORE_WRITES))
def test_a_run_store_write_whose_commit_answer_was_lost_is_applied_once(postgres_url: str, proxy: FaultProxy, write: str) -> None:
    apply, query, expected, tag = STORE_WRITES[write]
    store = RunStore(proxy.url)
    try:
        store.start_run("r1", "t", {}, "h", {})
        proxy.cut_after(tag)
        apply(store)
        assert proxy.cuts == 1  # the fault happened: the server committed, the client was cut off
        assert count(postgres_url, query) == expected
    finally:
        store.close()


def test_a_model_call_id_is_the_committed_rows_after_a_lost_answer(postgres_url: str, proxy: FaultProxy) -> None:
    store = RunStore(proxy.url)
    try:
        store.start_run("r1", "t", {}, "h", {})
        proxy.cut_after("INSERT")
        call_id = store.add_model_call("r1", 1, model_call())
        store.settle_model_call(call_id, model_call("ok"))
        assert [(r["id"], r["status"]) for r in store.model_calls("r1")] == [(call_id, "ok")]
    finally:
        store.close()


@pytest.fixture
def journal(tmp_path: Path, proxy: FaultProxy) -> Iterator[BatchJournal]:
    data = write_csv(tmp_path / "in.csv", tickets(3))
    opened = open_batch_journal(tmp_path / "j.sqlite3", task="triage", input_path=data, input_sha256=file_sha256(data),
                               options={"id_column": "id"}, database_url=proxy.url)  # fmt: skip
    from runner.batch.inputs import InputSource

    opened.ingest(rows_of(InputSource.open(data, id_column="id")))
    yield opened
    opened.close()


def test_journal_transitions_whose_commit_answer_was_lost_are_applied_once(journal: BatchJournal, proxy: FaultProxy) -> None:
    proxy.cut_after("UPDATE")  # a lone statement: committed when the server says it is ready again
    assert journal.mark_running(1, "run-1") == 1  # not 2: the attempt counted once
    proxy.cut_after("UPDATE")
    assert journal.record(1, RowOutcome("done", output={"a": 1}, usage=Usage(cost_usd=0.25)))  # not "was not running"
    journal.mark_running(2, "run-2")
    proxy.cut_after("UPDATE")
    assert journal.mark_not_run("batch cap reached", "max_cost_usd") == 1  # row 3, counted once
    proxy.cut_after("COMMIT")
    state = journal.prepare_resume()
    assert (state.interrupted, state.requeued, state.interrupted_runs) == (1, 1, ((2, "run-2"),))
    assert proxy.cuts == 4
    rows = {r.number: (r.status, r.attempts) for r in journal.records()}
    assert rows == {1: ("done", 1), 2: ("failed", 1), 3: ("pending", 0)}
    assert journal.spent().cost_usd == pytest.approx(0.25)


@pytest.fixture
def ledger(proxy: FaultProxy) -> Iterator[CapLedger]:
    opened = CapLedger(PostgresDatabase(proxy.url))
    opened.open("k", Caps(max_cost_usd=1.0, max_tool_calls=3), NOW)
    yield opened
    opened.close()


def test_ledger_operations_whose_commit_answer_was_lost_are_counted_once(ledger: CapLedger, proxy: FaultProxy) -> None:
    scope = SharedBudget(Caps(max_cost_usd=1.0, max_tool_calls=3), scope="fan-out", ledger=ledger, key="k")
    run = Budget(Caps(), "batch", parent=scope).child(Caps(), "task", owner=Owner("run-1"))
    proxy.cut_after("COMMIT")
    held = run.reserve(Estimate(10, 10, 0.4))
    assert ledger.figures("k")[1] == Usage(10, 10, 0, 0.4, 1)  # held once, not twice
    proxy.cut_after("COMMIT")
    held.settle(Usage(5, 5, 0, 0.1))
    spent, reserved = ledger.figures("k")
    assert (spent.cost_usd, spent.model_calls, reserved.cost_usd, reserved.model_calls) == (pytest.approx(0.1), 1, 0, 0)
    proxy.cut_after("COMMIT")
    run.take_tool_call()
    assert ledger.figures("k")[0].tool_calls == 1
    assert proxy.cuts == 3


# --- locks held by a session come back with it -------------------------------------------------


def test_a_journal_taken_by_another_process_while_the_connection_was_down_stops_this_one(
    tmp_path: Path, postgres_url: str
) -> None:
    data = write_csv(tmp_path / "in.csv", tickets(2))

    def open_journal() -> BatchJournal:
        return open_batch_journal(tmp_path / "j.sqlite3", task="triage", input_path=data, input_sha256=file_sha256(data),
                                 options={"id_column": "id"}, database_url=postgres_url)  # fmt: skip

    first = open_journal()
    from runner.batch.inputs import InputSource

    first.ingest(rows_of(InputSource.open(data, id_column="id")))
    terminate(postgres_url, first._db.session_pid)  # type: ignore[attr-defined]
    second = open_journal()  # the lock went with the session
    try:
        with pytest.raises(UsageError, match="another batch process took this journal") as stopped:
            first.mark_running(1, "r")
        assert "pid" in str(stopped.value)  # names the session that holds it now
        assert second.mark_running(1, "r") == 1
    finally:
        first.close()
        second.close()


def test_a_journal_whose_connection_came_back_keeps_its_lock(tmp_path: Path, postgres_url: str) -> None:
    data = write_csv(tmp_path / "in.csv", tickets(2))
    kwargs: dict[str, Any] = {"task": "triage", "input_path": data, "input_sha256": file_sha256(data),
                              "options": {"id_column": "id"}, "database_url": postgres_url}  # fmt: skip
    first = open_batch_journal(tmp_path / "j.sqlite3", **kwargs)
    try:
        terminate(postgres_url, first._db.session_pid)  # type: ignore[attr-defined]
        assert first.counts()["pending"] == 0  # reconnected, the lock taken again
        with pytest.raises(UsageError, match="another batch process is using this journal"):
            open_batch_journal(tmp_path / "j.sqlite3", **kwargs)
    finally:
        first.close()


def test_a_holder_whose_connection_came_back_is_alive_again(postgres_url: str) -> None:
    ledger = CapLedger(PostgresDatabase(postgres_url))
    watcher = CapLedger(PostgresDatabase(postgres_url))
    try:
        ledger.open("k", Caps(max_cost_usd=1.0), NOW)
        scope = SharedBudget(Caps(max_cost_usd=1.0), scope="fan-out", ledger=ledger, key="k")
        scope.reserve(Estimate(1, 1, 0.3))
        terminate(postgres_url, ledger.db.session_pid)  # type: ignore[attr-defined]
        assert watcher.scope("k").held_by_dead.cost_usd == pytest.approx(0.3)  # its liveness lock went with the session
        ledger.figures("k")  # any statement reconnects and takes the lock again
        assert watcher.scope("k").held_by_dead == Usage()
    finally:
        ledger.close()
        watcher.close()


# --- a server that stays away -----------------------------------------------------------------


def test_a_server_that_stays_down_is_a_clear_error_naming_the_store(postgres_url: str, postgres_cluster: Any) -> None:
    with_password = postgres_url.replace("runner@", "runner:s3cret-pw@")  # trust auth ignores it; messages must too
    db = PostgresDatabase(with_password, reconnect=Reconnect(give_up_after=0.5, first_delay=0.05))
    try:
        postgres_cluster.halt()
        with pytest.raises(StoreUnavailable) as gone:
            db.rows("SELECT 1")
        message = str(gone.value)
        assert "s3cret-pw" not in message and "runner:***@" in message
        assert "lost the connection to the store" in message and "pg_isready" in message
        assert "run the same command again" in message and RECONNECT_ENV in message
        postgres_cluster.resume()
        assert db.rows("SELECT 1 AS one") == [{"one": 1}]  # a later statement tries again
    finally:
        db.close()


def test_a_write_not_safe_to_repeat_is_not_repeated(postgres_url: str) -> None:
    db = PostgresDatabase(postgres_url)
    try:
        db.execute("CREATE TABLE counter (n INTEGER)")
        terminate(postgres_url, db.session_pid)
        with pytest.raises(StoreUnavailable, match="not repeated automatically"):
            db.execute("INSERT INTO counter VALUES (1)")
        assert db.row("SELECT COUNT(*) AS n FROM counter") == {"n": 0}
    finally:
        db.close()


ANSWER = {"choices": [{"message": {"role": "assistant", "content": "hi"}}]}
ANSWER_WRITES: dict[str, tuple[Callable[[ProviderAnswers, ProviderToolResults], Any], str, Any]] = {  # (write, query, expected)
    "sent": (lambda a, t: a.sent("r1", "f2", 7), "SELECT ledger_id FROM provider_answers WHERE fingerprint = 'f2'", 7),
    "in_part": (lambda a, t: a.in_part([("r1", "f1")], "p1"), "SELECT batch_part FROM provider_answers WHERE fingerprint = 'f1'", "p1"),
    "answered": (lambda a, t: a.answered("r1", "f1", ANSWER), "SELECT COUNT(*) FROM provider_answers WHERE body_json IS NOT NULL", 1),
    "failed": (lambda a, t: a.failed("r1", "f1", "server", "boom"), "SELECT error_kind FROM provider_answers WHERE fingerprint = 'f1'", "server"),
    "forget": (lambda a, t: a.forget("r1"), "SELECT COUNT(*) FROM provider_answers", 0),
    "forget tool results": (lambda a, t: t.forget("r1"), "SELECT COUNT(*) FROM provider_tool_results", 0),
}  # fmt: skip


@pytest.mark.parametrize("write", list(ANSWER_WRITES))
def test_a_kept_answer_is_written_across_a_dropped_connection(postgres_url: str, write: str) -> None:
    """A row whose call was answered must not fail over keeping the answer (its retry would pay
    for the call again: CI's 17 requests for 16 rows): every such write is safe to repeat, and is."""
    apply, query, expected = ANSWER_WRITES[write]
    db = PostgresDatabase(postgres_url)
    try:
        answers, tools = ProviderAnswers(db), ProviderToolResults(db)
        answers.sent("r1", "f1", 1)
        tools.keep("r1", "k1", {"ok": True}, "w1")
        terminate(postgres_url, db.session_pid)
        apply(answers, tools)
        assert db.reconnects == 1  # the write met the dropped session, and ran again on a new one
        assert count(postgres_url, query) == expected
    finally:
        db.close()


@pytest.mark.parametrize("value", ["soon", "-1", "nan", "inf"])
def test_a_bad_reconnect_setting_is_refused_by_name(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(RECONNECT_ENV, value)
    with pytest.raises(UsageError, match=rf"\${RECONNECT_ENV}={json.dumps(value)[1:-1]!r}"):
        Reconnect.from_env()


def test_the_reconnect_setting_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(RECONNECT_ENV, "7.5")
    assert Reconnect.from_env().give_up_after == 7.5
    monkeypatch.setenv(RECONNECT_ENV, "")
    assert Reconnect.from_env() == Reconnect()
