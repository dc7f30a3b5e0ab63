"""``runner caps settle-dead`` and what ``runner caps show`` says of dead holders' reservations,
through the real CLI on both backends: a killed worker's reservations whose calls the run store
recorded are settled to the recorded usage (or released when recorded as not billed), the
others stay held at their worst case, live holders' reservations are never touched, and
running it again changes nothing. ``caps show`` finds a fan-out's only SQLite ledger by itself
and opens it read-only (the file's journal mode and bytes unchanged)."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runner.caps.budget import Estimate
from runner.config.specs import Caps
from runner.core.calls import ModelCallEntry
from runner.core.usage import Usage
from runner.store.cap_ledger import CapLedger
from runner.store.connect import open_database
from runner.store.runstore import RunStore
from tests.cli.test_caps_cli import KEY, NOW, scope_run
from tests.support.cap_holder import Holder
from tests.support.project import run_cli

pytestmark = pytest.mark.timeout(240)
BILLED = Usage(7, 3, 0, 0.01)


@pytest.fixture
def ledger(store_target: str | Path) -> Iterator[CapLedger]:
    opened = CapLedger(open_database(store_target))
    opened.open(KEY, Caps(max_cost_usd=1.0), NOW)
    yield opened
    opened.close()


@pytest.fixture
def runs(store_target: str | Path, tmp_path: Path) -> Iterator[tuple[RunStore, list[str]]]:
    """The run store the workers wrote, and the ``--runs`` flag that names it (none: the ledger's own database)."""
    if isinstance(store_target, Path):
        store = RunStore(tmp_path / "runs.sqlite3")
        yield store, ["--runs", str(tmp_path / "runs.sqlite3")]
    else:
        store = RunStore(store_target)
        yield store, []
    store.close()


def cli(command: str, target: str | Path, *args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> Any:
    store = ["--store", str(target)] if target else []
    return run_cli(cwd or Path.cwd(), None, "caps", command, *store, *args, env=env, drop=("RUNNER_STORE",))


def as_json(result: Any) -> dict[str, Any]:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)  # type: ignore[no-any-return]


def record(store: RunStore, run_id: str, entry: str, usage: Usage, status: str = "ok") -> None:
    """What a worker writes before it settles its reservation: the call, naming the reservation."""
    store.start_run(run_id, "triage", {}, "hash", {})
    call = ModelCallEntry("s1", "agent", "gpt-4o-mini", 1, usage, 0.1, status, reservation=entry)  # type: ignore[arg-type]
    store.add_model_call(run_id, 1, call)


def dead_worker(ledger: CapLedger, target: str | Path) -> dict[str, str]:
    """A worker that reserved for run-a ($0.3), run-b ($0.2) and run-c ($0.1), then was killed: run id -> entry id."""
    holder = Holder(target, ("run-a", 0.3), ("run-b", 0.2), ("run-c", 0.1), key=KEY)
    holder.kill()
    while not ledger.scope(KEY).dead_holders:
        time.sleep(0.05)
    rows = ledger.db.rows("SELECT run_id, id FROM cap_entries WHERE status = 'held'")
    return {str(r["run_id"]): str(r["id"]) for r in rows}


def test_dead_reservations_are_settled_to_what_the_run_store_recorded_and_no_lower(
    ledger: CapLedger, store_target: str | Path, runs: tuple[RunStore, list[str]]
) -> None:
    store, flag = runs
    live = scope_run(ledger, KEY, "run-live").reserve(Estimate(10, 10, 0.15))  # this process: alive
    entries = dead_worker(ledger, store_target)
    record(store, "run-a", entries["run-a"], BILLED)  # answered and recorded, then killed before settling
    record(store, "run-b", entries["run-b"], Usage(), status="error")  # failed, not billed
    # run-c: nothing recorded (the call may have been billed): it must stay at its worst case

    (shown,) = as_json(cli("show", store_target, "--json", *flag))["scopes"]
    states = {e["run_id"]: (e["state"], e["recorded"]) for e in shown["dead_entries"]}
    assert states["run-a"][0] == "recorded" and states["run-a"][1]["cost_usd"] == pytest.approx(0.01)
    assert states["run-b"] == ("not_billed", None) and states["run-c"] == ("unrecorded", None)
    text = cli("show", store_target, *flag)
    assert "recorded in the run store: 2 of them" in text.stdout and "runner caps settle-dead" in text.stdout

    done = as_json(cli("settle-dead", store_target, "--json", *flag))
    (scope,) = done["scopes"]
    assert [e["run_id"] for e in scope["settled"]] == ["run-a"] and [e["run_id"] for e in scope["released"]] == ["run-b"]
    assert [e["run_id"] for e in scope["kept"]] == ["run-c"] and scope["live_entries"] == 1

    figures = ledger.scope(KEY)
    assert figures.spent.cost_usd == pytest.approx(0.01) and figures.spent.model_calls == 1  # run-a, as billed
    assert (figures.spent.input_tokens, figures.spent.output_tokens) == (7, 3)
    assert figures.reserved.cost_usd == pytest.approx(0.1 + 0.15) and figures.reserved.model_calls == 2  # run-c, live
    assert figures.held_by_dead.cost_usd == pytest.approx(0.1)
    statuses = {r["run_id"]: r["status"] for r in ledger.db.rows("SELECT run_id, status FROM cap_entries")}
    assert statuses == {"run-a": "settled", "run-b": "released", "run-c": "held", "run-live": "held"}

    again = as_json(cli("settle-dead", store_target, "--json", *flag))["scopes"][0]
    assert again["settled"] == [] and again["released"] == [] and len(again["kept"]) == 1  # applied once
    assert ledger.scope(KEY).spent == figures.spent and ledger.scope(KEY).reserved == figures.reserved
    live.settle(Usage(5, 5, 0, 0.05))  # the live worker settles its own call as usual
    assert ledger.scope(KEY).spent.cost_usd == pytest.approx(0.06)


def test_without_a_run_store_every_dead_reservation_stays_at_its_worst_case(
    ledger: CapLedger, store_target: str | Path, tmp_path: Path
) -> None:
    dead_worker(ledger, store_target)
    before = ledger.scope(KEY)
    result = cli("settle-dead", store_target, cwd=tmp_path)  # SQLite: no runs.sqlite3 under ./.runner
    assert result.returncode == 0, result.stderr
    assert "kept 3 dead reservation(s) at their worst case ($0.600000)" in result.stdout
    after = ledger.scope(KEY)
    assert after.spent == before.spent and after.reserved == before.reserved and after.held_by_dead == before.held_by_dead


def test_a_live_holders_reservations_are_never_settled(
    ledger: CapLedger, store_target: str | Path, runs: tuple[RunStore, list[str]]
) -> None:
    store, flag = runs
    holder = Holder(store_target, ("run-a", 0.3), key=KEY)  # alive
    try:
        (entry,) = [str(r["id"]) for r in ledger.db.rows("SELECT id FROM cap_entries WHERE status = 'held'")]
        record(store, "run-a", entry, BILLED)  # even a recorded call: its holder may still settle it
        (scope,) = as_json(cli("settle-dead", store_target, "--json", *flag))["scopes"]
        assert scope["settled"] == [] and scope["live_entries"] == 1
        assert ledger.scope(KEY).reserved.cost_usd == pytest.approx(0.3)
    finally:
        holder.kill()


def test_the_project_run_store_is_found_from_root(ledger: CapLedger, store_target: str | Path, tmp_path: Path) -> None:
    if not isinstance(store_target, Path):
        pytest.skip("PostgreSQL: the run store is the ledger's own database")
    entries = dead_worker(ledger, store_target)
    project = tmp_path / "project"
    store = RunStore(project / ".runner" / "runs.sqlite3")
    record(store, "run-a", entries["run-a"], BILLED)
    store.close()
    (scope,) = as_json(cli("settle-dead", store_target, "--json", "--root", str(project)))["scopes"]
    assert [e["run_id"] for e in scope["settled"]] == ["run-a"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--scope", "fanout:nope"), "no such scope"),
        (("--runs", "missing.sqlite3"), "--runs missing.sqlite3: no such file"),
        (("--runs", "mysql://x/y"), "is not a PostgreSQL URL"),
    ],
)
def test_settle_dead_bad_flags_exit_2(ledger: CapLedger, store_target: str | Path, tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    result = cli("settle-dead", store_target, *args, cwd=tmp_path)
    assert result.returncode == 2 and message in result.stderr and "Traceback" not in result.stderr


def test_settle_dead_on_a_store_without_a_ledger_creates_nothing(store_target: str | Path, tmp_path: Path) -> None:
    open_database(store_target).close()
    result = cli("settle-dead", store_target, cwd=tmp_path)
    assert result.returncode == 2 and "holds no cap ledger" in result.stderr
    db = open_database(store_target)
    try:
        assert db.columns("cap_scopes") == set() and db.columns("cap_entries") == set()
    finally:
        db.close()


# --- finding a fan-out's SQLite ledger; reading it read-only ----------------------------------


def fanout_ledger(work: Path, run: str) -> Path:
    path = work / "dag" / hashlib.sha256(run.encode()).hexdigest()[:16] / "split" / "caps.sqlite3"
    path.parent.mkdir(parents=True)
    ledger = CapLedger(open_database(path))
    ledger.open(f"fanout:dag/{run}/split", Caps(max_cost_usd=1.0), NOW)
    ledger.close()
    return path


@pytest.mark.parametrize("backend", ["sqlite"])
def test_caps_show_finds_the_only_fanout_ledger_in_the_work_dir(tmp_path: Path, backend: str) -> None:
    work = tmp_path / "work"
    env = {"RUNNER_AIRFLOW_WORK_DIR": str(work)}
    none = cli("show", "", env=env, cwd=tmp_path)
    assert none.returncode == 2 and "no cap ledger given: pass --store" in none.stderr and str(work) in none.stderr
    first = fanout_ledger(work, "run-1")
    found = as_json(cli("show", "", "--json", env=env, cwd=tmp_path))
    assert found["store"] == str(first) and found["scopes"][0]["scope"] == "fanout:dag/run-1/split"
    as_json(cli("show", "", "--json", env={"RUNNER_AIRFLOW_WORK_DIR": f"local://{work}"}, cwd=tmp_path))
    second = fanout_ledger(work, "run-2")
    several = cli("show", "", env=env, cwd=tmp_path)
    assert several.returncode == 2 and "2 fan-out ledgers" in several.stderr
    assert str(first) in several.stderr and str(second) in several.stderr and "pass --store" in several.stderr


@pytest.mark.parametrize("backend", ["sqlite"])
def test_caps_show_leaves_an_sqlite_ledger_as_it_was(tmp_path: Path, backend: str) -> None:
    path = tmp_path / "caps.sqlite3"
    db = sqlite3.connect(path)
    db.execute("PRAGMA journal_mode=DELETE")
    db.close()
    ledger = CapLedger(open_database(path))  # (the runner's own writers use WAL)
    ledger.open(KEY, Caps(max_cost_usd=1.0), NOW)
    ledger.close()
    db = sqlite3.connect(path)
    db.execute("PRAGMA journal_mode=DELETE")  # as a copy or a backup tool might leave it
    db.close()
    before = path.read_bytes()
    path.chmod(0o444)
    try:
        assert as_json(cli("show", path, "--json", cwd=tmp_path))["scopes"][0]["scope"] == KEY
    finally:
        path.chmod(0o644)
    assert path.read_bytes() == before
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA journal_mode").fetchone() == ("delete",)
    db.close()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("caps.sqlite3")) == ["caps.sqlite3"]
