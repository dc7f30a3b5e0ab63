"""A worker killed after its call was answered and recorded in the run store, but before it
settled the call's reservation in the shared cap ledger: the reservation stays held at its worst
case while the worker is dead. When the row's run resumes, the run store is consulted: the
reservation is settled to the usage it recorded (what the endpoint billed), not carried at its
worst case. Real shard processes (``shard_script.py``) killed with SIGKILL at that point, on
both backends: the test holds the ledger's write lock (SQLite) or its scope row (PostgreSQL)
while the call is answered, so the process records the call and then waits to settle it."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from runner.core.usage import Usage
from runner.model.server import ScriptedServer
from runner.store.cap_ledger import CapLedger
from runner.store.connect import open_database
from runner.store.runstore import RunStore
from tests.store.test_cap_takeover import TRIAGE, dead_figures_of
from tests.support.project import copy_shipped, runner_env

pytestmark = pytest.mark.timeout(240)
SHARD = Path(__file__).with_name("shard_script.py")
KEY = "fanout:recorded"
ANSWER_AFTER = 10.0  # how long the reply waits: the window in which the test takes the ledger's lock


def wait_for(condition: Callable[[], Any], process: subprocess.Popen[bytes]) -> Any:
    while not (found := condition()):
        assert process.poll() is None, process.communicate()
        time.sleep(0.05)
    return found


@contextmanager
def ledger_blocked(backend: str, target: str | Path) -> Iterator[None]:
    """Writes to the ledger's scope wait for the block (reads go on)."""
    if backend == "sqlite":
        db = sqlite3.connect(target, isolation_level=None, timeout=60)
        db.execute("BEGIN IMMEDIATE")
        try:
            yield
        finally:
            db.execute("ROLLBACK")
            db.close()
        return
    import psycopg

    with psycopg.connect(str(target)) as db:  # a transaction, rolled back at the end
        db.execute("SELECT key FROM cap_scopes WHERE key = %s FOR UPDATE", (KEY,))
        yield
        db.rollback()


def recorded_ok(store: RunStore) -> list[dict[str, Any]]:
    rows = store.database.rows("SELECT * FROM model_calls WHERE status = 'ok' AND reservation IS NOT NULL")
    return rows


def test_a_call_recorded_before_the_kill_settles_its_dead_reservation_to_the_recorded_usage(
    tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    url = str(request.getfixturevalue("postgres_url")) if backend == "postgresql" else None
    root = copy_shipped(tmp_path / "project")
    data = root / "tickets.jsonl"
    data.write_text(json.dumps({"id": "T0", "subject": "crash", "body": "It crashes (0)."}) + "\n")
    journal, ledger_path = root / "shard-1.sqlite3", root / "caps.sqlite3"
    argv = [sys.executable, str(SHARD), str(root), str(data), str(journal), str(ledger_path), KEY, "1.0", *([url] if url else [])]
    slow = {"when": {"last_message": r"crashes \(0\)"}, "times": 1, "reply": {"content": TRIAGE, "latency_seconds": ANSWER_AFTER}}
    with ScriptedServer({"rules": [slow], "fallback": TRIAGE}) as server:
        shard_env = runner_env(server)
        first = subprocess.Popen(argv, cwd=root, env=shard_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            wait_for(lambda: server.requests, first)  # reserved, then sent: its reply waits
            store = RunStore(url or root / "runs.sqlite3")
            with ledger_blocked(backend, url or ledger_path):
                call = wait_for(lambda: recorded_ok(store), first)[0]  # answered and recorded; settling waits on the ledger
                first.send_signal(signal.SIGKILL)
                first.wait(timeout=60)
        finally:
            first.kill()
            first.communicate()
        ledger = CapLedger(open_database(url or ledger_path))
        dead = dead_figures_of(ledger, KEY)
        entry = ledger.db.row("SELECT * FROM cap_entries WHERE scope = ? AND id = ?", (KEY, call["reservation"]))
        assert entry is not None and entry["status"] == "held"  # the kill came between the record and the settlement
        worst = float(entry["cost_usd"])
        assert dead.held_by_dead.cost_usd == pytest.approx(worst) and float(call["cost_usd"]) < worst
        second = subprocess.run(argv, cwd=root, env=shard_env, capture_output=True, text=True, timeout=180)
        assert second.returncode == 0, second.stderr
        assert len(server.requests) == 2  # the row's step ran again (the kill came before its step was saved)
    figures = ledger.scope(KEY)
    entry = ledger.db.row("SELECT * FROM cap_entries WHERE scope = ? AND id = ?", (KEY, call["reservation"]))
    assert entry is not None and entry["status"] == "settled" and float(entry["spent_cost_usd"]) == pytest.approx(float(call["cost_usd"]))
    billed = store.database.rows("SELECT * FROM model_calls WHERE status = 'ok'")
    assert len(billed) == 2
    assert figures.reserved == Usage() and figures.held_by_dead == Usage()
    assert figures.spent.model_calls == 2
    assert figures.spent.cost_usd == pytest.approx(sum(float(r["cost_usd"]) for r in billed))  # each call as billed, no worst case
    assert figures.spent.input_tokens == sum(int(r["input_tokens"]) for r in billed)
    store.close()
    ledger.close()


# --- the take-over's rule, over reservations of a killed holder process ------------------------


def entry_of(ledger: CapLedger, run_id: str) -> str:
    found = ledger.db.rows("SELECT id FROM cap_entries WHERE scope = 'k' AND run_id = ?", (run_id,))
    assert len(found) == 1
    return str(found[0]["id"])


def test_recorded_usage_replaces_the_worst_case_and_an_unbilled_failure_releases(
    ledger: CapLedger, store_target: str | Path
) -> None:
    from tests.store.test_cap_takeover import dead_figures, resumed_run
    from tests.support.cap_holder import Holder

    holder = Holder(store_target, ("run-a", 0.3), ("run-b", 0.2), ("run-c", 0.1))
    holder.kill()
    dead_figures(ledger)
    a, b, c = (entry_of(ledger, run) for run in ("run-a", "run-b", "run-c"))
    assert resumed_run(ledger, "run-a").take_over("run-a", {a: Usage(4, 4, 1, 0.05)}) == Usage(4, 4, 1, 0.05, 1)
    assert resumed_run(ledger, "run-b").take_over("run-b", {b: None}) == Usage()  # failed, not billed: released
    assert resumed_run(ledger, "run-c").take_over("run-c", {a: Usage(1, 1, 0, 0.01)}) == Usage(10, 10, 0, pytest.approx(0.1), 1)  # type: ignore[arg-type]
    spent, reserved = ledger.figures("k")
    assert (reserved.cost_usd, reserved.model_calls, reserved.input_tokens) == (pytest.approx(0), 0, 0)
    assert (spent.cost_usd, spent.model_calls, spent.input_tokens, spent.cached_input_tokens) == (pytest.approx(0.15), 2, 14, 1)
    statuses = {r["id"]: r["status"] for r in ledger.db.rows("SELECT id, status FROM cap_entries WHERE scope = 'k'")}
    assert statuses == {a: "settled", b: "released", c: "carried"}
    assert resumed_run(ledger, "run-a").take_over("run-a", {a: Usage(4, 4, 1, 0.05)}) == Usage()  # once
    assert ledger.figures("k")[0].cost_usd == pytest.approx(0.15)


def test_a_live_holders_recorded_reservation_is_left_to_it(ledger: CapLedger, store_target: str | Path) -> None:
    from tests.store.test_cap_takeover import resumed_run
    from tests.support.cap_holder import Holder

    holder = Holder(store_target, ("run-a", 0.3))
    try:
        entry = entry_of(ledger, "run-a")
        assert resumed_run(ledger, "run-a").take_over("run-a", {entry: Usage(1, 1, 0, 0.01)}) == Usage()
        assert ledger.figures("k")[1].cost_usd == pytest.approx(0.3)  # still held by its live holder
    finally:
        holder.kill()


def test_the_run_store_names_each_calls_reservation(tmp_path: Path) -> None:
    from runner.core.calls import ModelCallEntry

    store = RunStore(tmp_path / "runs.sqlite3")
    try:
        def call(status: str, usage: Usage, reservation: str | None) -> ModelCallEntry:
            return ModelCallEntry("s1", "a", "m", 1, usage, 0.0, status, reservation=reservation)  # type: ignore[arg-type]

        store.start_run("r", "t", {}, "h", {})
        ok = store.add_model_call("r", 1, call("reserved", Usage(9, 9, 0, 0.9), "res-ok"))
        store.settle_model_call(ok, call("ok", Usage(2, 3, 1, 0.02), "res-ok"))
        failed = store.add_model_call("r", 1, call("reserved", Usage(9, 9, 0, 0.9), "res-free"))
        store.settle_model_call(failed, call("error", Usage(), "res-free"))
        billed = store.add_model_call("r", 1, call("reserved", Usage(9, 9, 0, 0.9), "res-billed"))
        store.settle_model_call(billed, call("error", Usage(9, 9, 0, 0.9), "res-billed"))
        store.add_model_call("r", 1, call("reserved", Usage(9, 9, 0, 0.9), "res-in-flight"))
        store.add_model_call("r", 1, call("ok", Usage(1, 1, 0, 0.01), None))  # from before reservations were named
        assert store.recorded_calls("r") == {
            "res-ok": Usage(2, 3, 1, 0.02), "res-free": None, "res-billed": Usage(9, 9, 0, 0.9),
        }  # fmt: skip
        assert store.recorded_calls("other") == {}
    finally:
        store.close()
