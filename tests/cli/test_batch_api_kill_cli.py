"""``kill -9`` at every point of a provider batch round, then the same command again: no round
is submitted twice, no row is lost, and the earlier rounds are answered from the store.

The loopback server holds the killed process's request at the named point (its Batch API's
``hold``); the test kills the process there with SIGKILL, then lets the server go on (or
drops the request, as if it never arrived) and runs the command again.
"""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from runner.model.batch_endpoints import BatchBehaviour
from runner.model.server import ScriptedServer
from tests.cli.batch_api_project import (
    batch_inputs,
    chat_calls,
    command,
    live_cost,
    provider_state,
    records,
    row_of,
    via_api,
    wait_until,
)
from tests.cli.rounds_project import ROUNDS, SCRIPT, numbers, rounds_project

pytestmark = pytest.mark.timeout(300)
ROWS = 3
EXACT = ROUNDS * live_cost(100, 10) / 2  # what each row costs at the batch price


@pytest.fixture
def project() -> Iterator[Path]:
    with rounds_project() as root:
        yield root


def _kill(process: subprocess.Popen[bytes]) -> None:
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)


def _resume(root: Path, server: ScriptedServer, argv: list[str], env: dict[str, str]) -> None:
    resumed = subprocess.run(argv, cwd=root, env=env, capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL)
    assert resumed.returncode == 0, resumed.stderr


def _every_round_once(server: ScriptedServer, out: Path) -> dict[str, dict[str, object]]:
    batches = batch_inputs(server)
    assert len(batches) == ROUNDS  # no round was created twice
    for lines in batches:
        assert sorted(row_of(line) for line in lines) == [f"r{i}" for i in range(1, ROWS + 1)]
    assert len(server.billed) == ROWS * ROUNDS and chat_calls(server) == []  # nothing answered or paid twice
    rows = records(out)
    assert len(rows) == ROWS and all(r["status"] == "done" and r["output"] == {"answer": 42} for r in rows.values())
    return rows


# point held -> whether the held request did its work (False: dropped, as if it never arrived)
POINTS = {"upload": False, "create": False, "created": True, "output": True}


@pytest.mark.parametrize("point", sorted(POINTS))
def test_kill_9_in_the_second_round_then_resume_submits_no_round_twice(project: Path, point: str) -> None:
    source, out, journal = numbers(project, ROWS), project / "out.jsonl", project / "journal.sqlite3"
    after = 2 if point in ("created", "output") else 1  # the second round's request (one batch exists, or two)
    with ScriptedServer(SCRIPT, batch=BatchBehaviour(polls=1, hold=frozenset({point}), hold_after=after)) as server:
        argv, env = command(project, server, "compute", *via_api(source, out, "--journal", str(journal)))
        process = subprocess.Popen(argv, cwd=project, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            assert wait_until(lambda: server.batches.holding(point) > 0), f"never reached {point}"
        finally:
            _kill(process)
        server.batches.behaviour = BatchBehaviour(polls=1)
        server.batches.release(drop=not POINTS[point])
        state = provider_state(journal)
        assert state is not None and len(state["intents"] if point != "output" else state["out"]) == 1
        _resume(project, server, argv, env)
        rows = _every_round_once(server, out)
        after_resume = provider_state(journal)
        assert after_resume is not None and after_resume["intents"] == [] and after_resume["out"] == []
    # the killed round's calls settled at what they used (answered late), or at nothing (never sent)
    assert all(r["cost_usd"] == pytest.approx(EXACT) and r["attempts"] == 2 for r in rows.values())
    assert not any(r["warnings"] for r in rows.values())  # nothing left counted at a worst case


def test_kill_9_while_polling_then_resume_reattaches_to_the_same_batch(project: Path) -> None:
    source, out, journal = numbers(project, ROWS), project / "out.jsonl", project / "journal.sqlite3"
    with ScriptedServer(SCRIPT, batch=BatchBehaviour(polls=10_000)) as server:
        argv, env = command(project, server, "compute", *via_api(source, out, "--journal", str(journal)))
        process = subprocess.Popen(argv, cwd=project, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            polled = wait_until(lambda: bool((provider_state(journal) or {}).get("out"))
                                and any(b.polls >= 2 for b in server.batches.batches.values()))
            assert polled, "the provider batch was never recorded and polled"
        finally:
            _kill(process)
        (out_batch,) = provider_state(journal)["out"]  # type: ignore[index]
        assert not out.exists() and server.batches.batches_created == 1
        server.batches.behaviour = BatchBehaviour(polls=1)
        _resume(project, server, argv, env)
        assert server.batches.batches[out_batch["id"]].status == "completed"
        rows = _every_round_once(server, out)
    assert all(r["cost_usd"] == pytest.approx(EXACT) and r["attempts"] == 2 for r in rows.values())


def test_a_retry_that_lost_the_run_store_keeps_the_first_rounds_answers_and_records_their_cost(project: Path) -> None:
    """Killed while reading the first round's results, then retried on a worker without the run
    store (the journal elsewhere): the batch's answers are taken by the calls they answer, and
    recorded then, at the batch price: nothing sent twice, no spend lost."""
    source, out = numbers(project, ROWS), project / "out.jsonl"
    journal = project.parent / f"{project.name}-shared" / "journal.sqlite3"
    journal.parent.mkdir()
    with ScriptedServer(SCRIPT, batch=BatchBehaviour(polls=1, hold=frozenset({"output"}), hold_after=1)) as server:
        argv, env = command(project, server, "compute", *via_api(source, out, "--journal", str(journal)))
        process = subprocess.Popen(argv, cwd=project, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            assert wait_until(lambda: server.batches.holding("output") > 0), "never read the first round's results"
        finally:
            _kill(process)
        server.batches.behaviour = BatchBehaviour(polls=1)
        server.batches.release(drop=False)
        for stale in (project / ".runner").glob("runs.sqlite3*"):
            stale.unlink()  # the run store: the record of which call each line answers, and their reservations
        _resume(project, server, argv, env)
        rows = _every_round_once(server, out)
    assert all(r["cost_usd"] == pytest.approx(EXACT) for r in rows.values())  # the first round's calls counted once


def test_kill_9_while_a_split_round_goes_out_then_resume_bills_each_row_once(project: Path) -> None:
    """Five rows at two requests a batch: killed once the round's first batch is created, its
    other calls still queued (never in a batch). The resumed command collects the first batch,
    sends the others, and no row keeps a killed call's worst case: each costs one call a round."""
    rows = 5
    source, out, journal = numbers(project, rows), project / "out.jsonl", project / "journal.sqlite3"
    limits = BatchBehaviour(polls=1, max_requests=2)
    with ScriptedServer(SCRIPT, batch=replace(limits, hold=frozenset({"created"}))) as server:
        argv, env = command(project, server, "compute", *via_api(source, out, "--journal", str(journal), "--batch-max-requests", "2"))
        process = subprocess.Popen(argv, cwd=project, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            assert wait_until(lambda: server.batches.holding("created") > 0), "the first batch was never created"
        finally:
            _kill(process)
        server.batches.behaviour = limits
        server.batches.release()
        _resume(project, server, argv, env)
        batches = batch_inputs(server)
        billed = server.billed_usd(batch=True)
        assert len(server.billed) == rows * ROUNDS and chat_calls(server) == []  # each call answered (paid) once
    sizes = [len(lines) for lines in batches]
    assert max(sizes) == 2 and sum(sizes) == rows * ROUNDS and len(batches) > ROUNDS  # split, and no line sent twice
    done = records(out)
    assert {r["status"] for r in done.values()} == {"done"} and len(done) == rows
    assert all(r["cost_usd"] == pytest.approx(EXACT) for r in done.values())  # no worst case left from the killed process
    assert sum(r["cost_usd"] for r in done.values()) == pytest.approx(billed)
