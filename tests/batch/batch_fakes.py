"""Helpers for batch tests: task inputs, input files, and an in-process executor (no model, no HTTP)."""

from __future__ import annotations

import asyncio
import csv
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from runner.batch.inputs import InputSource, read_rows
from runner.caps.budget import Estimate
from runner.config.specs import Caps, InputSpec
from runner.core.results import RunResult
from runner.core.usage import Usage
from runner.errors import CapReached
from runner.runs.options import RunOptions

TICKET_SPECS = (
    InputSpec("subject", "string"),
    InputSpec("priority", "string", enum=("low", "normal", "high"), default="normal", has_default=True, required=False),
)


def write_csv(path: Path, rows: list[dict[str, Any]]) -> Path:
    with path.open("w", encoding="utf-8", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def tickets(n: int) -> list[dict[str, Any]]:
    return [
        {"id": f"T{i:04d}", "subject": f"subject {i}", "priority": "high" if i % 3 else "low"} for i in range(1, n + 1)
    ]


class FakeExecutor:
    """Runs a row in process: reserves and settles through the row's budget like a real run.

    ``fail`` maps a row subject to how its attempts fail: a list of error kinds, consumed per
    attempt (``None`` means succeed). ``on_start`` is called with (inputs, options) first.
    """

    def __init__(
        self,
        *,
        delay: float = 0.0,
        calls: int = 1,
        cost_per_call: float = 0.0,
        tokens_per_call: tuple[int, int] = (0, 0),
        fail: Mapping[str, Sequence[str | None]] | None = None,
        on_start: Callable[[dict[str, Any], RunOptions], Any] | None = None,
    ) -> None:
        self.delay, self.calls = delay, calls
        self.cost_per_call, self.tokens_per_call = cost_per_call, tokens_per_call
        self.fail = {k: list(v) for k, v in (fail or {}).items()}
        self.on_start = on_start
        self.executed: list[str] = []
        self.in_flight = self.max_in_flight = self.max_tasks = 0
        self.options: list[RunOptions] = []
        self.totals: dict[str, Usage] = {}

    async def __call__(self, inputs: dict[str, Any], options: RunOptions) -> RunResult:
        self.executed.append(inputs["subject"])
        self.options.append(options)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        self.max_tasks = max(self.max_tasks, len(asyncio.all_tasks()))
        try:
            if self.on_start is not None:
                self.on_start(inputs, options)
            return await self._run(inputs, options)
        finally:
            self.in_flight -= 1

    async def _run(self, inputs: dict[str, Any], options: RunOptions) -> RunResult:
        assert options.parent_budget is not None and options.run_id is not None
        budget = options.parent_budget.child(Caps(), "run")
        tin, tout = self.tokens_per_call
        for _ in range(self.calls):
            if options.rate_gate is not None:
                await options.rate_gate.acquire(tin + tout)
            try:
                held = budget.reserve(Estimate(tin, tout, self.cost_per_call))
            except CapReached as exc:
                return self._result(options, budget, "capped", error=str(exc), error_kind=exc.cap, error_scope=exc.scope)
            await asyncio.sleep(self.delay)
            held.settle(Usage(tin, tout, 0, self.cost_per_call))
        plan = self.fail.get(inputs["subject"])
        kind = plan.pop(0) if plan else None
        if kind is not None:
            return self._result(options, budget, "failed", error=f"scripted failure ({kind})", error_kind=kind)
        return self._result(options, budget, "completed", output={"subject": inputs["subject"].upper()})

    def _result(self, options: RunOptions, budget: Any, status: str, **fields: Any) -> RunResult:
        """Like ``execute_task``: cost and tokens are the run's totals over all its attempts."""
        total = self.totals[str(options.run_id)] = self.totals.get(str(options.run_id), Usage()) + budget.spent
        return RunResult(run_id=str(options.run_id), task="triage", status=status, usage=total, **fields)


def rows_of(source: InputSource) -> Iterator[Any]:
    return read_rows(source, TICKET_SPECS)
