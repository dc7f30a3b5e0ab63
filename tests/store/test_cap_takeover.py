"""A worker that dies holding reservations in a shared cap scope: what it held stays counted at
its worst case (the endpoint may bill those calls) and is reported as held by a dead holder;
when the row's run resumes, its next attempt takes that over, carried forward as spend once,
instead of leaving it held beside its own new reservations. Real processes killed with SIGKILL,
on both backends."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from runner.batch.journal_open import open_batch_journal
from runner.caps.budget import Budget, Estimate, Owner
from runner.caps.shared import SharedBudget
from runner.config.specs import Caps
from runner.core.usage import Usage
from runner.model.server import ScriptedServer
from runner.store.cap_ledger import CapLedger
from runner.store.connect import open_database
from runner.store.postgres import PostgresDatabase
from tests.postgres import terminate
from tests.store.conftest import NOW
from tests.support.cap_holder import Holder
from tests.support.project import copy_shipped, runner_env

pytestmark = pytest.mark.timeout(240)
TRIAGE = '{"category": "bug", "urgency": "high", "summary": "It crashes."}'
SHARD = Path(__file__).with_name("shard_script.py")


def resumed_run(ledger: CapLedger, run_id: str, attempt: int = 2) -> Budget:
    """The scope of a run's next attempt, in a shard's batch, in the shared scope."""
    batch = Budget(Caps(), "batch", parent=SharedBudget(Caps(max_cost_usd=1.0), scope="fan-out", ledger=ledger, key="k"))
    return batch.child(Caps(), "task", owner=Owner(run_id, attempt))


def batch_markdown(tmp_path: Path, ledger: dict[str, Any]) -> str:
    """The batch report's markdown with this ledger entry (over an empty journal)."""
    from runner.batch.summary import batch_report, render_markdown
    from tests.batch.batch_fakes import tickets, write_csv

    data = write_csv(tmp_path / "in.csv", tickets(1))
    with open_batch_journal(tmp_path / "j.sqlite3", task="t", input_path=data, input_sha256=_sha(data)) as journal:
        return render_markdown({**batch_report(journal), "ledger": ledger})


def dead_figures(ledger: CapLedger) -> Any:
    """The scope once the dead holder's session is gone (PostgreSQL ends it when it sees the socket close)."""
    while not (found := ledger.scope("k")).dead_holders:
        time.sleep(0.05)
    return found


def test_a_killed_workers_reservations_are_reported_as_held_by_a_dead_holder(
    ledger: CapLedger, store_target: str | Path, tmp_path: Path
) -> None:
    holder = Holder(store_target, ("run-a", 0.3), ("run-b", 0.2))
    try:
        live = ledger.scope("k")
        assert live.held_by_dead == Usage() and live.reserved.cost_usd == pytest.approx(0.5)  # alive: in flight, not dead
    finally:
        holder.kill()
    figures = dead_figures(ledger)
    assert figures.dead_holders == (holder.label,)
    assert figures.held_by_dead == Usage(20, 20, 0, pytest.approx(0.5), 2)  # type: ignore[arg-type]
    assert figures.reserved.cost_usd == pytest.approx(0.5)  # still counted: the endpoint may bill those calls
    report = figures.as_dict()
    assert report["held_by_dead"]["cost_usd"] == pytest.approx(0.5) and report["dead_holders"] == [holder.label]
    markdown = batch_markdown(tmp_path, report)
    assert f"Held by workers that died ({holder.label}): 2 call(s), $0.500000 at their worst case" in markdown
    with pytest.raises(Exception, match="fan-out cap max_cost_usd=1"):
        resumed_run(ledger, "other").reserve(Estimate(1, 1, 0.6))  # the cap holds with them counted


def test_the_resumed_run_takes_over_its_dead_predecessors_reservation_once(ledger: CapLedger, store_target: str | Path) -> None:
    holder = Holder(store_target, ("run-a", 0.3), ("run-b", 0.2))
    holder.kill()
    dead_figures(ledger)
    run = resumed_run(ledger, "run-a")
    assert run.take_over("run-a") == Usage(10, 10, 0, pytest.approx(0.3), 1)  # type: ignore[arg-type]
    assert run.take_over("run-a") == Usage()  # carried once; a second resume finds nothing held
    figures = ledger.scope("k")
    assert figures.spent == Usage(10, 10, 0, pytest.approx(0.3), 1)  # type: ignore[arg-type]
    assert figures.reserved == Usage(10, 10, 0, pytest.approx(0.2), 1)  # type: ignore[arg-type]  # run-b's, not this run's
    assert figures.held_by_dead.cost_usd == pytest.approx(0.2)
    run.reserve(Estimate(10, 10, 0.3)).settle(Usage(5, 5, 0, 0.1))  # the new attempt's own call
    spent, reserved = ledger.figures("k")
    assert (spent.cost_usd, spent.model_calls) == (pytest.approx(0.4), 2)  # the dead call's worst case + the new actual
    assert reserved.cost_usd == pytest.approx(0.2)


def test_what_several_dead_workers_held_for_one_run_is_carried_once_in_all(ledger: CapLedger, store_target: str | Path) -> None:
    """The run crashed twice (two workers died in turn, each with a call of it in flight)."""
    first = Holder(store_target, ("run-a", 0.2))
    first.kill()
    second = Holder(store_target, ("run-a", 0.3), ("run-b", 0.1))
    second.kill()
    while len(ledger.scope("k").dead_holders) < 2:
        time.sleep(0.05)
    assert sorted(ledger.scope("k").dead_holders) == sorted([first.label, second.label])
    run = resumed_run(ledger, "run-a", attempt=3)
    assert run.take_over("run-a").cost_usd == pytest.approx(0.5)
    spent, reserved = ledger.figures("k")
    assert (spent.cost_usd, spent.model_calls, reserved.cost_usd, reserved.model_calls) == (
        pytest.approx(0.5), 2, pytest.approx(0.1), 1,
    )  # fmt: skip
    assert ledger.scope("k").dead_holders == (second.label,)  # what it still holds is run-b's


def test_a_live_workers_reservations_are_never_taken_over(ledger: CapLedger, store_target: str | Path) -> None:
    holder = Holder(store_target, ("run-a", 0.3))
    try:
        assert resumed_run(ledger, "run-a").take_over("run-a") == Usage()
        assert ledger.figures("k")[1].cost_usd == pytest.approx(0.3)
    finally:
        holder.kill()


def test_reservations_without_an_owner_stay_held_and_reported(ledger: CapLedger, store_target: str | Path) -> None:
    holder = Holder(store_target, ("run-a", 0.3))
    holder.kill()
    dead_figures(ledger)
    assert resumed_run(ledger, "run-z").take_over("run-z") == Usage()  # another run: nothing of its own to take over
    assert ledger.scope("k").held_by_dead.cost_usd == pytest.approx(0.3)


def test_a_cut_off_holder_that_settles_after_the_take_over_replaces_the_worst_case(postgres_url: str) -> None:
    """Not dead after all (its connection was cut, the session ended): its late settlement is the
    better knowledge, and replaces the carried worst case instead of adding to it."""
    first = CapLedger(PostgresDatabase(postgres_url))
    second = CapLedger(PostgresDatabase(postgres_url))
    try:
        first.open("k", Caps(max_cost_usd=1.0), NOW)
        held = resumed_run(first, "run-a", attempt=1).reserve(Estimate(10, 10, 0.3))
        terminate(postgres_url, first.db.session_pid)  # type: ignore[attr-defined]  # and wait until it is gone
        assert dead_figures(second).held_by_dead.cost_usd == pytest.approx(0.3)
        assert resumed_run(second, "run-a").take_over("run-a").cost_usd == pytest.approx(0.3)
        held.settle(Usage(4, 4, 0, 0.05))  # the first worker reconnects and settles its call
        spent, reserved = second.figures("k")
        assert (spent.cost_usd, spent.model_calls, reserved.cost_usd) == (pytest.approx(0.05), 1, pytest.approx(0))
        held.settle(Usage(4, 4, 0, 0.05))  # settled once
        assert second.figures("k")[0].cost_usd == pytest.approx(0.05)
    finally:
        first.close()
        second.close()


def test_a_holder_on_another_machine_counts_as_alive(tmp_path: Path) -> None:
    ledger = CapLedger(open_database(tmp_path / "caps.sqlite3"))
    try:
        ledger.open("k", Caps(max_cost_usd=1.0), NOW)
        resumed_run(ledger, "run-a", attempt=1).reserve(Estimate(1, 1, 0.3))
        ledger.db.execute("UPDATE cap_holders SET host = 'elsewhere', pid = 1")  # an SQLite file on a shared disk
        assert ledger.scope("k").held_by_dead == Usage()
        assert resumed_run(CapLedger(ledger.db), "run-a").take_over("run-a") == Usage()
    finally:
        ledger.close()


# --- a shard process killed mid-call, then retried --------------------------------------------


def test_a_shard_killed_mid_call_and_retried_counts_each_call_once(tmp_path: Path, backend: str, request: pytest.FixtureRequest) -> None:
    url = str(request.getfixturevalue("postgres_url")) if backend == "postgresql" else None
    root = copy_shipped(tmp_path / "project")
    data = root / "tickets.jsonl"
    data.write_text("".join(json.dumps({"id": f"T{i}", "subject": "crash", "body": f"It crashes ({i})."}) + "\n"
                            for i in range(5)))  # fmt: skip
    journal, ledger_path = root / "shard-1.sqlite3", root / "caps.sqlite3"
    argv = [sys.executable, str(SHARD), str(root), str(data), str(journal), str(ledger_path), "fanout:t", "1.0",
            *([url] if url else [])]  # fmt: skip
    hang = {"when": {"last_message": r"crashes \([01]\)"}, "times": 2, "reply": {"hang_seconds": 120}}
    with ScriptedServer({"rules": [hang], "fallback": TRIAGE}) as server:
        shard_env = runner_env(server)
        first = subprocess.Popen(argv, cwd=root, env=shard_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        while len(server.requests) < 2:  # both rows' calls are in flight (reserved, sent, hanging)
            assert first.poll() is None, first.communicate()
            time.sleep(0.05)
        first.kill()
        first.communicate()
        ledger = CapLedger(open_database(url or ledger_path))
        dead = dead_figures_of(ledger, "fanout:t")
        assert dead.held_by_dead.model_calls == 2 and dead.dead_holders == (f"{socket.gethostname()} pid {first.pid}",)
        second = subprocess.run(argv, cwd=root, env=shard_env, capture_output=True, text=True, timeout=180)
        requests = len(server.requests)
    assert second.returncode == 0, second.stderr
    assert json.loads(second.stdout)["counts"]["done"] == 5
    assert requests == 7  # five rows, and the two calls the dead worker had in flight made again
    figures = ledger.scope("fanout:t")
    with open_batch_journal(journal, task="triage_ticket", input_path=data, input_sha256=_sha(data),
                           options=_options(journal, url), database_url=url) as reopened:  # fmt: skip
        journal_spent = reopened.spent()
        attempts = sorted(r.attempts for r in reopened.records())
    ledger.close()
    assert figures.reserved == Usage() and figures.held_by_dead == Usage() and figures.dead_holders == ()
    assert figures.spent.model_calls == 7  # each call once: two carried at their worst case, five settled
    assert figures.spent.cost_usd == pytest.approx(journal_spent.cost_usd)  # the ledger and the rows' books agree
    assert figures.spent.cost_usd <= 1.0 and attempts == [1, 1, 1, 2, 2]


def dead_figures_of(ledger: CapLedger, key: str) -> Any:
    while not (found := ledger.scope(key)).dead_holders:
        time.sleep(0.05)
    return found


def _sha(path: Path) -> str:
    from runner.batch.inputs import file_sha256

    return file_sha256(path)


def _options(journal: Path, url: str | None) -> dict[str, Any]:
    """The input options the shard's journal pinned (read back, so reopening matches them)."""
    if url:
        import psycopg

        with psycopg.connect(url) as db:
            row = db.execute("SELECT value FROM journal_meta WHERE journal = %s AND key = 'options'", (str(journal),)).fetchone()
    else:
        import sqlite3

        with sqlite3.connect(journal) as db:
            row = db.execute("SELECT value FROM batch WHERE key = 'options'").fetchone()
        db.close()
    assert row is not None
    return dict(json.loads(row[0]))
