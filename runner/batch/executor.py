"""What runs one batch row: the executor contract, and the production executor over ``execute_task``.

An executor is ``async (inputs, options) -> RunResult``. It must not raise for run
failures (it returns ``failed``/``capped``/``stuck``), must spend through
``options.parent_budget`` (a child of the batch budget, reserving before each call) and
consult ``options.rate_gate`` before each call. ``RunResult.usage`` is the
run's totals over every attempt of ``options.run_id``, which stays the same when a row is
retried so the run can resume.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from runner.core.ports import RateGate
from runner.core.results import RunResult
from runner.core.usage import Usage
from runner.runs.options import RunOptions

if TYPE_CHECKING:
    from runner.config.project import Project
    from runner.config.specs import TaskSpec
    from runner.model.factory import BatchTransport

RowExecutor = Callable[[dict[str, Any], RunOptions], Awaitable[RunResult]]
"""Runs one row: ``await executor(inputs, options) -> RunResult`` (never raises for run failures)."""


class RowDeferred(Exception):
    """The row did not finish and did not fail: it waits on something outside this command (a
    provider batch still running), so it is recorded ``not_run`` and goes on when the command
    runs again."""

    kind = "provider_pending"


class SpendLedger(Protocol):
    """Where each run's spend is written before it happens (the run store)."""

    def spent(self, run_id: str) -> Usage:
        """What every attempt of ``run_id`` has spent, calls left in flight by a crash at their worst case."""

    def recorded_calls(self, run_id: str) -> Mapping[str, Usage | None]:
        """How the calls of ``run_id`` that ended are recorded, by reservation (see
        :meth:`runner.store.runstore.RunStore.recorded_calls`)."""


class TaskExecutor:
    """Rows through ``runner.runs.execute.execute_task``, sharing one run store and one model pool.

    Sharing matters at batch scale: one HTTP connection pool per endpoint instead of one
    per row, and one SQLite connection to the run store. A rate-limited retry seen by any
    row (the model client's ``on_retry`` with kind ``rate_limited``) pauses ``rate_gate``
    for the wait it is about to make, so every row holds off, not just that one. Close it
    with :meth:`aclose` (or ``async with``).
    """

    def __init__(
        self, project: Project, task: TaskSpec, *, rate_gate: RateGate | None = None, store_path: Path | None = None,
        store_url: str | None = None,
    ) -> None:
        from runner.model.factory import ModelPool
        from runner.runs.execute import open_run_store

        self.project, self.task, self.rate_gate = project, task, rate_gate
        self.store = open_run_store(project.root, path=store_path, url=store_url)
        self.pool = ModelPool(on_retry=self._on_retry)

    def send_through(self, transport: BatchTransport) -> None:
        """Send the rows' calls to OpenAI-compatible endpoints through ``transport`` (their
        provider's Batch API, ``--via batch-api``) instead of calling them directly."""
        self.pool.batch = transport

    def spent(self, run_id: str) -> Usage:
        """The run store's ledger for one run (a :class:`SpendLedger`)."""
        return self.store.spent(run_id)

    def recorded_calls(self, run_id: str) -> Mapping[str, Usage | None]:
        """The run store's record of how each call of ``run_id`` ended, by reservation."""
        return self.store.recorded_calls(run_id)

    async def __call__(self, inputs: dict[str, Any], options: RunOptions) -> RunResult:
        from runner.runs.execute import execute_task

        return await execute_task(self.project, self.task, inputs, options, store=self.store, pool=self.pool)

    def _on_retry(self, kind: str, attempt: int, wait_seconds: float) -> None:
        if kind == "rate_limited" and self.rate_gate is not None:
            self.rate_gate.pause(wait_seconds)

    async def aclose(self) -> None:
        await self.pool.aclose()
        self.store.close()

    async def __aenter__(self) -> TaskExecutor:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
