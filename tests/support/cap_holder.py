"""A process that holds reservations in a shared cap scope, for tests of what the ledger
does (and reports) when the process dies with calls in flight."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

HOLDER = """
import sys, time
from runner.caps.budget import Budget, Estimate, Owner
from runner.caps.shared import SharedBudget
from runner.config.specs import Caps
from runner.core.spender import Spender
from runner.store.cap_ledger import CapLedger
from runner.store.connect import open_database

ledger = CapLedger(open_database(sys.argv[1]))
scope = SharedBudget(Caps(max_cost_usd=1.0), scope="fan-out", ledger=ledger, key=sys.argv[2])
task, agent, model = (sys.argv[3].split("/") if sys.argv[3] else (None, None, None))
for run_id, cost in zip(sys.argv[4::2], sys.argv[5::2]):
    run = Budget(Caps(), "batch", parent=scope).child(Caps(), "task", owner=Owner(run_id, task=task))
    run.reserve(Estimate(10, 10, float(cost)), caller=Spender(agent=agent, model=model))
print("held", flush=True)
time.sleep(600)
"""


def env() -> dict[str, str]:
    """This process's environment, with its import path (the checkout under test first)."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}


class Holder:
    """A process that reserves ``(run id, cost)`` pairs (10 + 10 tokens and a model call each)
    in scope ``key`` (opened with ``max_cost_usd: 1.0``) of the ledger at ``target``, as calls
    of ``spender`` (task, agent, model; none by default), and waits to be killed."""

    def __init__(
        self, target: str | Path, *holds: tuple[str, float], key: str = "k", spender: tuple[str, str, str] | None = None
    ) -> None:
        who = "/".join(spender) if spender else ""
        argv = [sys.executable, "-c", HOLDER, str(target), key, who, *(str(x) for pair in holds for x in pair)]
        self.process = subprocess.Popen(argv, stdout=subprocess.PIPE, env=env())
        assert self.process.stdout is not None and self.process.stdout.readline().strip() == b"held"

    @property
    def label(self) -> str:
        """How the ledger names this holder."""
        return f"{socket.gethostname()} pid {self.process.pid}"

    def kill(self) -> None:
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait()
        assert self.process.stdout is not None
        self.process.stdout.close()
