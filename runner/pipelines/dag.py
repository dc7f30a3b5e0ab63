"""Running steps in dependency order, independent ones concurrently.

A step starts when all it depends on have completed; a step whose dependency did not
complete is skipped (with the reason). Once any step reaches a cap, no new step starts.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from runner.core.steps import StepKind, StepRecord
from runner.pipelines.host import StepHost

NodeRunner = Callable[[], Awaitable[StepRecord]]


@dataclass(frozen=True)
class Node:
    """One schedulable step: its id, dependencies and how to run it."""

    id: str
    depends_on: tuple[str, ...]
    run: NodeRunner
    kind: StepKind = "agent"


async def run_dag(host: StepHost, nodes: Sequence[Node], max_parallel: int) -> dict[str, StepRecord]:
    """Run ``nodes`` respecting dependencies, at most ``max_parallel`` at once."""
    results: dict[str, StepRecord] = {}
    done_events = {n.id: asyncio.Event() for n in nodes}
    gate = asyncio.Semaphore(max_parallel)
    halted: list[str] = []

    async def run_node(node: Node) -> None:
        for dep in node.depends_on:
            if dep in done_events:
                await done_events[dep].wait()
        blocked = [d for d in node.depends_on if not _completed(results.get(d) or host.done.get(d))]
        try:
            if blocked or halted:
                reason = f"not run: dependency {blocked[0]} did not complete" if blocked else f"not run: {halted[0]}"
                results[node.id] = host.skip(node.id, node.kind, reason)
                return
            async with gate:
                if halted:
                    results[node.id] = host.skip(node.id, node.kind, f"not run: {halted[0]}")
                    return
                record = await node.run()
            results[node.id] = record
            if record.status == "capped":
                halted.append(f"a cap was reached in step {node.id}")
        finally:
            done_events[node.id].set()

    async with asyncio.TaskGroup() as group:  # one failure cancels the rest: nothing runs on unseen
        for node in nodes:
            group.create_task(run_node(node))
    return results


def _completed(record: StepRecord | None) -> bool:
    return record is not None and record.completed
