"""The lock object of an output at a URL (no PostgreSQL store), contended by real processes:
several batches taking over one stale lock at once (exactly one wins: the claim is
create-exclusive), and a holder paused past its lease (another batch takes the output; the
holder, resumed, finds it lost and never overwrites the new holder's lock)."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from runner.batch.output_lock import exclusive_url_output
from runner.batch.output_lock_object import read
from runner.errors import OutputLockLost, UsageError
from runner.locations import location

pytestmark = pytest.mark.timeout(180)
CONTENDER = Path(__file__).with_name("lock_contender.py")
NEVER = 3600.0


class Contender:
    def __init__(self, target: str, tmp: Path, lease: float = 120.0, heartbeat: float = NEVER, host: str | None = None) -> None:
        argv = [sys.executable, str(CONTENDER), target, str(tmp / "go"), str(tmp / "done"), str(lease), str(heartbeat),
                *([host] if host else [])]  # fmt: skip
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
        self.process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)

    def line(self) -> str:
        assert self.process.stdout is not None
        found = self.process.stdout.readline().strip()
        assert found, self.process.stderr.read() if self.process.stderr else ""
        return found

    def stop(self) -> None:
        self.process.kill()
        self.process.communicate()


@pytest.fixture
def shared(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    (tmp_path / "out").mkdir()
    yield f"local://{tmp_path}/out/out.jsonl", tmp_path / "out" / ".out.jsonl.lock"


def plant_stale(lock: Path) -> None:
    past = (dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)).isoformat()
    lock.write_text(json.dumps({"pid": 4242, "host": "gone-worker", "task": "old", "token": "old", "expires_at": past}))


@pytest.mark.parametrize("round_", range(3))
def test_of_several_batches_taking_over_one_stale_lock_at_once_exactly_one_wins(
    shared: tuple[str, Path], tmp_path: Path, round_: int
) -> None:
    target, lock = shared
    plant_stale(lock)
    contenders = [Contender(target, tmp_path) for _ in range(6)]
    try:
        (tmp_path / "go").touch()
        first = [c.line() for c in contenders]  # the winner holds until "done": every other one answered meanwhile
        assert sorted(first) == ["refused"] * 5 + ["won"], first
        winner = contenders[first.index("won")]
        assert (read(location(target).parent / ".out.jsonl.lock") or {}).get("task") == f"contender {winner.process.pid}"
        (tmp_path / "done").touch()
        assert winner.line() == "held"
        assert winner.process.wait(timeout=60) == 0
    finally:
        for contender in contenders:
            contender.stop()
    assert sorted(p.name for p in lock.parent.iterdir()) == []  # released: lock, lease and claim objects all gone


def test_a_holder_paused_past_its_lease_finds_its_lock_taken_and_never_overwrites_the_new_one(
    shared: tuple[str, Path], tmp_path: Path
) -> None:
    target, lock = shared
    (tmp_path / "go").touch()
    paused = Contender(target, tmp_path, lease=1.0, heartbeat=0.05, host="worker-a")  # another machine: only its lease tells
    try:
        assert paused.line() == "won"
        paused.process.send_signal(signal.SIGSTOP)  # a long pause (GC, a frozen VM): it cannot renew
        lease = lock.parent / f"{lock.name}.{json.loads(lock.read_text())['token']}.lease"
        while dt.datetime.fromisoformat(json.loads(lease.read_text())["expires_at"]) >= dt.datetime.now(dt.UTC):
            os.sched_yield()
        with exclusive_url_output(location(target), {"task": "taker"}, heartbeat_seconds=NEVER) as hold:  # type: ignore[arg-type]
            assert json.loads(lock.read_text())["task"] == "taker"
            paused.process.send_signal(signal.SIGCONT)
            said = paused.line()
            assert said.startswith("lost: ") and "lost its lock on the output" in said, said
            assert json.loads(lock.read_text())["task"] == "taker"  # its renewals wrote only its own lease
            hold.check()  # the taker's lock is intact
        assert paused.process.wait(timeout=60) == 0
    finally:
        paused.process.send_signal(signal.SIGCONT)
        paused.stop()
    assert sorted(p.name for p in lock.parent.iterdir()) == []


def test_a_claim_on_the_holders_lock_is_a_lost_lock(shared: tuple[str, Path]) -> None:
    target, lock = shared
    with exclusive_url_output(location(target), {"task": "first"}, heartbeat_seconds=NEVER) as hold:  # type: ignore[arg-type]
        token = json.loads(lock.read_text())["token"]
        assert "expires_at" not in json.loads(lock.read_text())  # its lease object has it: an older runner never takes it over live
        (lock.parent / f"{lock.name}.{token}.claim").write_text(json.dumps({"pid": 5, "host": "worker-b"}))
        with pytest.raises(OutputLockLost, match="taking over this batch's lock object"):
            hold.check()
    assert lock.exists()  # claimed by another: this batch leaves it to the claimant


def test_a_lock_object_removed_under_the_holder_is_a_lost_lock(shared: tuple[str, Path]) -> None:
    target, lock = shared
    with exclusive_url_output(location(target), {"task": "first"}, heartbeat_seconds=NEVER) as hold:  # type: ignore[arg-type]
        lock.unlink()
        with pytest.raises(OutputLockLost, match="was removed"):
            hold.check()


def test_a_stale_lock_whose_claimant_died_is_refused_naming_what_to_delete(shared: tuple[str, Path]) -> None:
    target, lock = shared
    plant_stale(lock)
    claim = lock.parent / f"{lock.name}.old.claim"
    claim.write_text(json.dumps({"pid": 77, "host": "gone-worker-2", "token": "c"}))
    with pytest.raises(UsageError) as refused, exclusive_url_output(location(target), {"task": "t"}):  # type: ignore[arg-type]
        pass
    message = str(refused.value)
    assert "being taken over by pid 77 on gone-worker-2" in message and str(claim) in message and "delete" in message
    claim.unlink()  # as the message says
    with exclusive_url_output(location(target), {"task": "t"}):  # type: ignore[arg-type]
        assert json.loads(lock.read_text())["task"] == "t"


def test_a_renewed_lease_keeps_a_lock_from_another_host_alive(shared: tuple[str, Path]) -> None:
    """The lock's own expires_at is old, but its lease object (which only its holder writes) is fresh."""
    target, lock = shared
    plant_stale(lock)
    later = (dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)).isoformat()
    (lock.parent / f"{lock.name}.old.lease").write_text(json.dumps({"expires_at": later}))
    with pytest.raises(UsageError, match=re.escape(f"held until {later}")), exclusive_url_output(location(target), {"task": "t"}):  # type: ignore[arg-type]
        pass
