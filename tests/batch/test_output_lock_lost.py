"""A URL output's lock lost while the batch runs: its PostgreSQL session ended (an
administrator's ``pg_terminate_backend``, a dropped connection) and another batch held the
output meanwhile. The holder notices at its next heartbeat or check, whichever comes first,
and stops (:class:`OutputLockLost`, exit 2) before writing the output. When nobody held it in
between, the lock is simply taken again."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Iterator

import pytest

from runner.batch.output import exclusive_output
from runner.batch.output_lock import OutputHold, exclusive_url_output, while_held
from runner.errors import OutputLockLost, UsageError
from runner.locations import location
from tests.postgres import terminate

pytestmark = pytest.mark.timeout(120)
HOLDER = {"task": "first", "input": "/data/a.csv", "journal": "/data/.runner/batches/first.sqlite3"}
NEVER = 3600.0  # no heartbeat: the test asks the lock itself


@pytest.fixture
def target() -> object:
    return location("memory://lost-lock/out.jsonl")


def lock_session(url: str) -> int:
    """The server pid of this process's output-lock session."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as db:
        found = db.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name LIKE %s", (f"runner output lock % pid {os.getpid()}",)
        ).fetchall()
    assert len(found) == 1, found
    return int(found[0][0])


@pytest.fixture
def first(target: object, postgres_url: str) -> Iterator[OutputHold]:
    with exclusive_url_output(target, HOLDER, store_url=postgres_url, heartbeat_seconds=NEVER) as hold:  # type: ignore[arg-type]
        yield hold


def test_another_batch_holding_the_output_after_the_session_ended_is_a_lost_lock(
    first: OutputHold, target: object, postgres_url: str
) -> None:
    first.check()  # held
    terminate(postgres_url, lock_session(postgres_url))
    with exclusive_url_output(target, {"task": "second"}, store_url=postgres_url, heartbeat_seconds=NEVER) as second:  # type: ignore[arg-type]
        with pytest.raises(OutputLockLost) as lost:
            first.check()
        second.check()  # the second batch's lock is untouched by the first's failed attempt
    message = str(lost.value)
    assert "another batch (pid" in message and "task second" in message and "holds it now" in message
    assert "did not write the output" in message and HOLDER["journal"] in message and "run the same command again" in message
    assert lost.value.exit_code == 2 and first.lost is lost.value
    with pytest.raises(OutputLockLost):
        first.check()  # lost for good, even once the other batch has ended


def test_another_batch_that_held_the_output_and_ended_meanwhile_is_a_lost_lock_too(
    first: OutputHold, target: object, postgres_url: str
) -> None:
    terminate(postgres_url, lock_session(postgres_url))
    with exclusive_url_output(target, {"task": "second"}, store_url=postgres_url, heartbeat_seconds=NEVER):  # type: ignore[arg-type]
        pass  # it ran, wrote the output, and ended: the lock is free again
    with pytest.raises(OutputLockLost, match="another batch held it meanwhile and has ended"):
        first.check()


def test_a_session_ended_while_nobody_else_came_takes_the_lock_again(first: OutputHold, target: object, postgres_url: str) -> None:
    terminate(postgres_url, lock_session(postgres_url))
    first.check()  # reconnected, and the lock taken again: nobody held the output in between
    assert first.lost is None
    with pytest.raises(UsageError, match=r"another batch .*task first"), exclusive_url_output(
        target, {"task": "second"}, store_url=postgres_url, heartbeat_seconds=NEVER  # type: ignore[arg-type]
    ):
        pass


def intrude(url: str, target: object) -> None:
    """Make the store name another holder of ``target``'s lock (what any batch taking it writes).
    The lock's session lives on: a heartbeat finds the loss without a race against its reconnect."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as db:
        changed = db.execute(
            "UPDATE output_locks SET holder = %s WHERE target = %s", ('{"pid": 7, "host": "elsewhere", "task": "intruder"}', str(target))
        ).rowcount
    assert changed == 1


def test_the_heartbeat_notices_without_a_check(target: object, postgres_url: str) -> None:
    heard = threading.Event()
    with exclusive_url_output(target, HOLDER, store_url=postgres_url, heartbeat_seconds=0.05) as hold:  # type: ignore[arg-type]
        hold.on_lost(heard.set)
        intrude(postgres_url, target)
        assert heard.wait(60), "the heartbeat never noticed"  # a bound on a hang, not a speed check
        assert isinstance(hold.lost, OutputLockLost) and "pid 7, host elsewhere, task intruder" in str(hold.lost)
        late = threading.Event()
        hold.on_lost(late.set)  # registered after the loss: called at once
        assert late.is_set()


def test_a_lost_lock_cancels_the_rows_it_guards(target: object, postgres_url: str) -> None:
    cancelled = threading.Event()

    async def rows() -> None:
        try:
            await asyncio.sleep(NEVER)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    async def batch(hold: OutputHold) -> None:
        await while_held(hold, rows())

    with exclusive_url_output(target, HOLDER, store_url=postgres_url, heartbeat_seconds=0.05) as hold:  # type: ignore[arg-type]
        intrude(postgres_url, target)
        with pytest.raises(OutputLockLost, match="task intruder"):
            asyncio.run(batch(hold))
    assert cancelled.is_set()


def test_rows_that_end_first_return_their_result() -> None:
    async def batch() -> int:
        async def rows() -> int:
            return 7

        return await while_held(OutputHold("out.jsonl", {}), rows())

    assert asyncio.run(batch()) == 7


def test_a_local_files_flock_hold_is_never_lost(tmp_path: object) -> None:
    from pathlib import Path

    assert isinstance(tmp_path, Path)
    with exclusive_output(tmp_path / "out.jsonl", HOLDER) as hold:
        hold.check()
        assert hold.lost is None


def test_a_server_restart_with_nobody_else_waiting_keeps_the_lock(target: object, postgres_url: str, postgres_cluster: object) -> None:
    with exclusive_url_output(target, HOLDER, store_url=postgres_url, heartbeat_seconds=NEVER) as hold:  # type: ignore[arg-type]
        postgres_cluster.restart()  # type: ignore[attr-defined]  # every session ends, the row stays
        hold.check()
        with pytest.raises(UsageError, match="another batch"), exclusive_url_output(
            target, {"task": "second"}, store_url=postgres_url, heartbeat_seconds=NEVER  # type: ignore[arg-type]
        ):
            pass


def test_a_store_that_stays_away_is_a_lost_lock(
    target: object, postgres_url: str, postgres_cluster: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RUNNER_STORE_RECONNECT_SECONDS", "0")
    with exclusive_url_output(target, HOLDER, store_url=postgres_url, heartbeat_seconds=NEVER) as hold:  # type: ignore[arg-type]
        postgres_cluster.halt()  # type: ignore[attr-defined]
        with pytest.raises(OutputLockLost, match="could not get it back") as lost:
            hold.check()  # nobody can tell whether another batch took it: not written
        assert "did not write the output" in str(lost.value)
        postgres_cluster.resume()  # type: ignore[attr-defined]
