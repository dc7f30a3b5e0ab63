"""``runner batch --dedupe``: rows with identical inputs run once.

The first row with given inputs runs; a later row with the same inputs waits for it and,
when it completed, gets the same output with nothing spent (its own record, run id and row
id, and a warning naming the run that paid). A duplicate of a row that did not complete
runs itself, so one failure is never copied onto other rows.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from typing import Any

from runner.batch.executor import RowExecutor
from runner.core.results import RunResult
from runner.core.usage import Usage
from runner.runs.options import RunOptions


class DedupingExecutor:
    """A :data:`~runner.batch.executor.RowExecutor` that runs each distinct input once."""

    def __init__(self, executor: RowExecutor):
        self.executor = executor
        self._first: dict[str, asyncio.Future[RunResult]] = {}

    async def __call__(self, inputs: dict[str, Any], options: RunOptions) -> RunResult:
        key = json.dumps(inputs, sort_keys=True, default=str, ensure_ascii=False)
        earlier = self._first.get(key)
        if earlier is not None:
            await asyncio.wait([earlier])  # not cancelled with it: shielded by asyncio.wait
            shared = _completed(earlier)
            if shared is not None:
                return _copied(shared, options.run_id or "")
        mine: asyncio.Future[RunResult] = asyncio.get_running_loop().create_future()
        self._first[key] = mine  # the latest attempt is what later duplicates wait for
        try:
            result = await self.executor(inputs, options)
        except BaseException:
            mine.cancel()
            raise
        mine.set_result(result)
        return result


def _completed(future: asyncio.Future[RunResult]) -> RunResult | None:
    if future.cancelled() or future.exception() is not None:
        return None
    result = future.result()
    return result if result.status == "completed" else None


def _copied(result: RunResult, run_id: str) -> RunResult:
    note = f"deduplicated: same inputs as run {result.run_id}, whose output this is; nothing was spent for this row"
    return replace(
        result, run_id=run_id, usage=Usage(), duration_seconds=0.0, report_dir=None, warnings=(*result.warnings, note)
    )
