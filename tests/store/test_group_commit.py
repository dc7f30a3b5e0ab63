"""Group commit (runner.store.group_commit): concurrent writers share transactions; a writer
that waits (``durable``) returns only once another connection can read what it wrote."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from runner.store.database import Database, SqliteDatabase
from runner.store.group_commit import GroupFailed, commit_group, commit_now, durable


def _table(path: Path) -> SqliteDatabase:
    db = SqliteDatabase(path)
    db.script("CREATE TABLE IF NOT EXISTS t (k TEXT PRIMARY KEY, v {int})")
    return db


def _seen(path: Path) -> set[str]:
    """What another connection (another process would see the same) reads as committed."""
    with sqlite3.connect(path) as other:
        return {k for (k,) in other.execute("SELECT k FROM t")}


def test_concurrent_writers_share_commits_and_each_is_durable_when_durable_returns(tmp_path: Path) -> None:
    db = _table(tmp_path / "s.sqlite3")
    seen_after_wait: dict[str, bool] = {}

    async def writer(i: int) -> None:
        db.execute("INSERT INTO t (k, v) VALUES (?, ?)", (f"k{i}", i))
        await durable()
        seen_after_wait[f"k{i}"] = f"k{i}" in _seen(tmp_path / "s.sqlite3")

    async def main() -> int:
        with commit_group() as group:
            await asyncio.gather(*(writer(i) for i in range(50)))
            return group.commits

    commits = asyncio.run(main())
    assert all(seen_after_wait.values()) and len(seen_after_wait) == 50
    assert commits < 5  # 50 writers, a handful of transactions (one per turn of the loop that waited)
    db.close()


def test_a_write_is_not_visible_to_others_before_its_group_commits(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite3"
    db = _table(path)

    async def main() -> tuple[set[str], set[str], set[str]]:
        with commit_group(window=60):  # only a wait (or the end of the group) commits
            db.execute("INSERT INTO t (k, v) VALUES ('a', 1)")
            before = _seen(path)
            own = {r["k"] for r in db.rows("SELECT k FROM t")}  # the writer's own connection reads it at once
            await durable()
            return before, own, _seen(path)

    before, own, after = asyncio.run(main())
    assert before == set() and own == {"a"} and after == {"a"}
    db.close()


def test_a_unit_that_fails_in_a_group_is_undone_alone(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite3"
    db = _table(path)

    def half_then_fail(unit_db: Database) -> None:
        unit_db.execute("INSERT INTO t (k, v) VALUES ('half', 1)")
        raise ValueError("the unit's own error")

    async def main() -> None:
        with commit_group():
            db.execute("INSERT INTO t (k, v) VALUES ('before', 1)")
            with pytest.raises(ValueError, match="own error"):
                db.atomic(half_then_fail)
            db.atomic(lambda unit_db: unit_db.execute("INSERT INTO t (k, v) VALUES ('after', 1)"))
            await durable()

    asyncio.run(main())
    assert _seen(path) == {"before", "after"}
    db.close()


def test_the_end_of_the_group_and_commit_now_commit_without_a_wait(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite3"
    db = _table(path)

    async def main() -> set[str]:
        with commit_group(window=60):
            db.execute("INSERT INTO t (k, v) VALUES ('now', 1)")
            commit_now()
            at_once = _seen(path)
            db.execute("INSERT INTO t (k, v) VALUES ('last', 1)")
        return at_once

    assert asyncio.run(main()) == {"now"}
    assert _seen(path) == {"now", "last"}
    db.close()


def test_a_journal_commits_after_the_store_its_rows_wrote_to(tmp_path: Path) -> None:
    store, journal = _table(tmp_path / "store.sqlite3"), _table(tmp_path / "journal.sqlite3")
    journal.commit_rank = 1
    order: list[str] = []
    for name, db in (("store", store), ("journal", journal)):
        original = db._commit
        db._commit = lambda name=name, original=original: (order.append(name), original())[1]  # type: ignore[method-assign]

    async def main() -> None:
        with commit_group():
            journal.execute("INSERT INTO t (k, v) VALUES ('row done', 1)")  # the journal's write comes first
            store.execute("INSERT INTO t (k, v) VALUES ('run record', 1)")
            await durable()

    asyncio.run(main())
    assert order == ["store", "journal"]
    store.close()
    journal.close()


def test_a_failed_commit_fails_its_waiters_and_refuses_later_writes(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite3"
    db = _table(path)

    def refuse() -> None:
        raise sqlite3.OperationalError("disk I/O error")

    async def main() -> None:
        with pytest.raises(GroupFailed), commit_group():
            db.execute("INSERT INTO t (k, v) VALUES ('lost', 1)")
            db._commit = refuse  # type: ignore[method-assign]
            with pytest.raises(GroupFailed, match="disk I/O error"):
                await durable()
            with pytest.raises(GroupFailed, match="run the batch again"):
                db.execute("INSERT INTO t (k, v) VALUES ('later', 1)")

    asyncio.run(main())
    assert _seen(path) == set()
    db.close()


def test_writes_from_another_thread_are_their_own_transactions(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite3"
    db = _table(path)

    async def main() -> set[str]:
        with commit_group(window=60):
            await asyncio.to_thread(db.execute, "INSERT INTO t (k, v) VALUES ('thread', 1)")
            return _seen(path)

    assert asyncio.run(main()) == {"thread"}
    db.close()


def test_a_call_cancelled_while_its_reservation_waits_for_the_commit_is_released_unsent(tmp_path: Path) -> None:
    from runner.agent.ledger import CallLedger
    from runner.caps.budget import Budget, Estimate
    from runner.config.specs import Caps
    from runner.core.calls import ModelCallEntry
    from runner.core.usage import Usage
    from runner.store.recorder import RunRecorder
    from runner.store.runstore import RunStore

    store = RunStore(tmp_path / "runs.sqlite3")
    attempt = store.start_run("r1", "t", {}, "hash", {})
    budget = Budget(Caps(max_cost_usd=1.0), "task")
    template = ModelCallEntry("main", "agent", "m", 1, Usage(), 0.0, "reserved")
    ledger = CallLedger(budget, Estimate(100, 50, 0.5), RunRecorder(store, "r1", attempt, None, ()), template)

    async def main() -> None:
        with commit_group(window=60):
            waiting = asyncio.ensure_future(ledger.open_in_group())
            await asyncio.sleep(0)  # reserved and written; waiting for the group's commit
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting

    asyncio.run(main())
    calls = store.model_calls("r1")
    assert [(c["status"], c["cost_usd"]) for c in calls] == [("error", 0.0)]  # never sent: nothing counted
    assert budget.spent == Usage()
    budget.reserve(Estimate(100, 50, 0.9))  # the cancelled call's 0.5 is not held any more
    store.close()


def test_a_reservation_the_store_refuses_to_record_is_released_unsent(tmp_path: Path) -> None:
    """The call is never sent when its reservation cannot be written down (a closed store, a
    failed commit group), so the budget does not keep holding its worst case."""
    from runner.agent.ledger import CallLedger
    from runner.caps.budget import Budget, Estimate
    from runner.config.specs import Caps
    from runner.core.calls import ModelCallEntry
    from runner.core.usage import Usage
    from runner.store.recorder import RunRecorder
    from runner.store.runstore import RunStore

    store = RunStore(tmp_path / "runs.sqlite3")
    attempt = store.start_run("r1", "t", {}, "hash", {})
    budget = Budget(Caps(max_cost_usd=1.0), "task")
    template = ModelCallEntry("main", "agent", "m", 1, Usage(), 0.0, "reserved")
    ledger = CallLedger(budget, Estimate(100, 50, 0.5), RunRecorder(store, "r1", attempt, None, ()), template)
    store.close()
    with pytest.raises(sqlite3.ProgrammingError):  # a closed database
        asyncio.run(ledger.open_in_group())
    budget.reserve(Estimate(100, 50, 0.9))  # the refused call's 0.5 is not held any more
