"""``runner caps show`` through the real CLI, on both store backends: each shared scope's caps,
spend, reservations in flight, what a killed worker still holds and what is left; JSON for
scripts; nothing written to the ledger; bad flags and missing ledgers as exit 2."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runner.caps.budget import Budget, Estimate, Owner
from runner.caps.shared import SharedBudget
from runner.config.specs import Caps
from runner.core.usage import Usage
from runner.store.cap_ledger import CapLedger
from runner.store.connect import open_database
from tests.support.cap_holder import Holder
from tests.support.project import run_cli

pytestmark = pytest.mark.timeout(240)
NOW = "2026-01-01T00:00:00+00:00"
KEY = "fanout:dag/run-1/split"
OTHER = "fanout:dag/run-2/split"


@pytest.fixture
def ledger(store_target: str | Path) -> Iterator[CapLedger]:
    opened = CapLedger(open_database(store_target))
    opened.open(KEY, Caps(max_cost_usd=1.0), NOW)
    yield opened
    opened.close()


def caps(target: str | Path, *args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> Any:
    """``runner caps show --store TARGET ARGS`` (no ``--store`` when ``target`` is empty)."""
    store = ["--store", str(target)] if target else []
    return run_cli(cwd or Path.cwd(), None, "caps", "show", *store, *args, env=env, drop=("RUNNER_STORE",))


def shown(result: Any) -> dict[str, Any]:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)  # type: ignore[no-any-return]


def scope_run(ledger: CapLedger, key: str, run_id: str) -> Budget:
    """A row's run inside a shard's batch inside the shared scope ``key`` (max $1)."""
    batch = Budget(Caps(), "batch", parent=SharedBudget(Caps(max_cost_usd=1.0), scope="fan-out", ledger=ledger, key=key))
    return batch.child(Caps(), "task", owner=Owner(run_id))


def counts(target: str | Path) -> tuple[int, ...]:
    db = open_database(target)
    try:
        return tuple(int(db.rows(f"SELECT COUNT(*) AS n FROM {table}")[0]["n"]) for table in ("cap_scopes", "cap_entries", "cap_holders"))
    finally:
        db.close()


def test_each_scope_shows_caps_spent_in_flight_dead_and_left(ledger: CapLedger, store_target: str | Path) -> None:
    run = scope_run(ledger, KEY, "run-live")
    run.reserve(Estimate(100, 50, 0.2)).settle(Usage(80, 20, 10, 0.05))  # billed (the settlement counts the call)
    run.reserve(Estimate(100, 50, 0.1))  # in flight, held by this (live) process
    run.take_tool_call()
    holder = Holder(store_target, ("run-a", 0.3), ("run-b", 0.2), key=KEY)
    holder.kill()
    while not ledger.scope(KEY).dead_holders:  # PostgreSQL ends the killed worker's session when it sees the socket close
        time.sleep(0.05)
    before = counts(store_target)

    (scope,) = shown(caps(store_target, "--json"))["scopes"]

    assert scope["scope"] == KEY and scope["caps"] == {"max_cost_usd": 1.0} and scope["created_at"] == NOW
    assert scope["spent"]["cost_usd"] == pytest.approx(0.05)
    assert (scope["spent"]["input_tokens"], scope["spent"]["model_calls"], scope["spent"]["tool_calls"]) == (80, 1, 1)
    assert scope["reserved"]["cost_usd"] == pytest.approx(0.6) and scope["reserved"]["model_calls"] == 3
    assert scope["held_by_dead"]["cost_usd"] == pytest.approx(0.5) and scope["held_by_dead"]["model_calls"] == 2
    assert scope["dead_holders"] == [holder.label]  # the live process's reservation is in flight, not dead
    assert scope["left"] == {"max_cost_usd": pytest.approx(0.35)}
    assert scope["entries"] == {"held": 3, "settled": 2, "carried": 0, "released": 0}  # a settled call, a tool call
    assert counts(store_target) == before  # read only: no holder registered, nothing changed

    text = caps(store_target)
    assert text.returncode == 0, text.stderr
    assert f"scope {KEY}  (opened {NOW})" in text.stdout
    assert "max_cost_usd" in text.stdout and "$1.000000" in text.stdout and "$0.350000" in text.stdout
    assert f"held by dead workers ({holder.label}): 2 model call(s), $0.500000" in text.stdout
    assert "entries:  3 held, 2 settled, 0 carried, 0 released" in text.stdout


def test_every_scope_is_listed_and_scope_picks_some(ledger: CapLedger, store_target: str | Path) -> None:
    ledger.open(OTHER, Caps(max_tokens=5000, max_steps=10), "2026-01-02T00:00:00+00:00")
    scope_run(ledger, OTHER, "run-x").reserve(Estimate(100, 50, 0.0)).settle(Usage(60, 40, 0, 0.0))
    every = shown(caps(store_target, "--json"))["scopes"]
    assert [s["scope"] for s in every] == [KEY, OTHER]  # oldest first
    (other,) = shown(caps(store_target, "--json", "--scope", OTHER, "--scope", OTHER))["scopes"]
    assert other["caps"] == {"max_steps": 10, "max_tokens": 5000}
    assert other["left"] == {"max_steps": 9, "max_tokens": 4900}
    both = shown(caps(store_target, "--json", "--scope", OTHER, "--scope", KEY))["scopes"]
    assert [s["scope"] for s in both] == [OTHER, KEY]


def test_an_unknown_scope_is_a_usage_error_with_suggestions(ledger: CapLedger, store_target: str | Path) -> None:
    result = caps(store_target, "--scope", "fanout:dag/run-1/splt")
    assert result.returncode == 2 and result.stdout == ""
    assert "--scope 'fanout:dag/run-1/splt': no such scope in" in result.stderr
    assert f"did you mean '{KEY}'?" in result.stderr and "Traceback" not in result.stderr


def test_a_store_without_a_ledger_lists_nothing_and_gains_no_tables(store_target: str | Path) -> None:
    open_database(store_target).close()  # an SQLite file, or a PostgreSQL database, with no cap tables
    assert shown(caps(store_target, "--json"))["scopes"] == []
    text = caps(store_target)
    assert text.returncode == 0 and "no cap scopes in" in text.stdout
    scoped = caps(store_target, "--scope", KEY)
    assert scoped.returncode == 2 and "holds no cap scopes" in scoped.stderr
    db = open_database(store_target)
    try:
        assert db.columns("cap_scopes") == set() and db.columns("cap_holders") == set()
    finally:
        db.close()


@pytest.mark.parametrize("backend", ["postgresql"])
def test_the_postgres_ledger_comes_from_runner_store_url_and_its_password_is_hidden(
    ledger: CapLedger, postgres_url: str
) -> None:
    with_password = postgres_url.replace("postgresql://runner@", "postgresql://runner:s3cret-pw@")
    result = caps("", "--json", env={"RUNNER_STORE_URL": with_password})
    listed = shown(result)
    assert [s["scope"] for s in listed["scopes"]] == [KEY]
    assert "s3cret-pw" not in result.stdout + result.stderr and "runner:***@" in listed["store"]


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        ((), {}, "no cap ledger given: pass --store"),
        (("--store", "missing.sqlite3"), {}, "--store missing.sqlite3: no such file"),
        (("--store", "mysql://user:pw@host/db"), {}, "is not a PostgreSQL URL"),
        (("--store", "notes.txt"), {}, "notes.txt (the cap ledger) is not a readable SQLite database"),
        ((), {"RUNNER_STORE_URL": "sqlite:///x.db"}, "is not a PostgreSQL URL"),
        (("--store", "ledger.sqlite3", "--bogus"), {}, "No such option '--bogus'"),
        (("--store", "ledger.sqlite3", "--scope"), {}, "'--scope' requires an argument"),
    ],
)
def test_bad_flags_and_missing_ledgers_exit_2(tmp_path: Path, args: tuple[str, ...], env: dict[str, str], message: str) -> None:
    (tmp_path / "notes.txt").write_text("not a database\n")
    CapLedger(open_database(tmp_path / "ledger.sqlite3")).close()
    result = run_cli(tmp_path, None, "caps", "show", *args, env=env, drop=("RUNNER_STORE",))
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr
    assert "pw@" not in result.stderr
    assert not (tmp_path / "missing.sqlite3").exists()  # a mistyped path is not created


def test_an_unreachable_postgres_store_exits_1(tmp_path: Path) -> None:
    url = f"postgresql://runner@/runner?host={tmp_path}/no-socket-here"
    result = run_cli(tmp_path, None, "caps", "show", "--store", url, drop=("RUNNER_STORE",))
    assert result.returncode == 1 and "cannot connect to the store" in result.stderr
    assert "Traceback" not in result.stderr


def test_scope_names_cannot_drive_the_terminal(tmp_path: Path) -> None:
    target = tmp_path / "caps.sqlite3"
    ledger = CapLedger(open_database(target))
    ledger.open("fanout:\x1b[2J\u202eevil", Caps(max_cost_usd=1.0), NOW)
    ledger.close()
    result = caps(target)
    assert result.returncode == 0, result.stderr
    assert "\x1b" not in result.stdout and "\u202e" not in result.stdout
    assert "fanout:\\x1b[2J\\u202eevil" in result.stdout
    assert shown(caps(target, "--json"))["scopes"][0]["scope"] == "fanout:\x1b[2J\u202eevil"


def test_a_take_over_shows_as_carried_spend_and_a_release_as_released(ledger: CapLedger, store_target: str | Path) -> None:
    holder = Holder(store_target, ("run-a", 0.3), ("run-b", 0.2), key=KEY)
    holder.kill()
    while not ledger.scope(KEY).dead_holders:
        time.sleep(0.05)
    resumed = scope_run(ledger, KEY, "run-a")
    assert resumed.take_over("run-a").cost_usd == pytest.approx(0.3)  # the dead worker's call for run-a, carried once
    resumed.reserve(Estimate(10, 10, 0.1)).release()  # a call that was never made

    (scope,) = shown(caps(store_target, "--json"))["scopes"]

    assert scope["entries"] == {"held": 1, "settled": 0, "carried": 1, "released": 1}
    assert scope["spent"]["cost_usd"] == pytest.approx(0.3) and scope["spent"]["model_calls"] == 1
    assert scope["reserved"]["cost_usd"] == pytest.approx(0.2) and scope["held_by_dead"]["cost_usd"] == pytest.approx(0.2)
    assert scope["left"]["max_cost_usd"] == pytest.approx(0.5)
