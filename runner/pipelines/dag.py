"""Running steps in dependency order, independent ones concurrently.

A step starts when all it depends on have completed; a step whose dependency did not
complete is skipped (with the reason). Once any step reaches a cap, no new step starts.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from runner.runs.steps import RunContext, new_step
from runner.store.runstore import now_iso

StepRunner = Callable[[], Awaitable[dict[str, Any]]]


@dataclass(frozen=True)
class Node:
    """One schedulable step: its id, dependencies and how to run it."""

    id: str
    depends_on: tuple[str, ...]
    run: StepRunner
    kind: str = "agent"


async def run_dag(ctx: RunContext, nodes: Sequence[Node], max_parallel: int) -> dict[str, dict[str, Any]]:
    """Run ``nodes`` respecting dependencies, at most ``max_parallel`` at once."""
    results: dict[str, dict[str, Any]] = {}
    done_events = {n.id: asyncio.Event() for n in nodes}
    gate = asyncio.Semaphore(max_parallel)
    halted: list[str] = []

    async def run_node(node: Node) -> None:
        for dep in node.depends_on:
            if dep in done_events:
                await done_events[dep].wait()
        blocked = [d for d in node.depends_on if results.get(d, ctx.done.get(d, {})).get("status") != "completed"]
        try:
            if blocked or halted:
                reason = f"not run: dependency {blocked[0]} did not complete" if blocked else f"not run: {halted[0]}"
                results[node.id] = _skipped(ctx, node, reason)
                return
            async with gate:
                if halted:
                    results[node.id] = _skipped(ctx, node, f"not run: {halted[0]}")
                    return
                record = await node.run()
            results[node.id] = record
            if record["status"] == "capped":
                halted.append(f"a cap was reached in step {node.id}")
        finally:
            done_events[node.id].set()

    async with asyncio.TaskGroup() as group:  # one failure cancels the rest: nothing runs on unseen
        for node in nodes:
            group.create_task(run_node(node))
    return results


def _skipped(ctx: RunContext, node: Node, reason: str) -> dict[str, Any]:
    step_id = node.id
    record = new_step(step_id, node.kind)
    record.update(status="skipped", error=reason, finished_at=now_iso())
    ctx.done[step_id] = record
    ctx.recorder.emit("step_finished", step=step_id, status="skipped", error=reason, cost_usd=0.0, duration_seconds=0.0)
    return record
