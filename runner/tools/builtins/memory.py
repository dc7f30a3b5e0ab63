"""Built-ins ``remember`` and ``recall``: long-term notes that outlive the run, in the agent's
memory scope (its own, its task's or the project's; see ``memory:`` in the agent's YAML)."""

from __future__ import annotations

import time
from typing import Annotated

from pydantic import Field

from runner.errors import ToolFailure
from runner.knowledge.memory import MemoryStore, Notebook
from runner.tools.base import ToolContext, ToolResult, tool


@tool
async def remember(ctx: ToolContext, note: Annotated[str, Field(min_length=1, max_length=4000)]) -> ToolResult:
    """Write a note to your long-term memory, for this and later runs (a fact, a decision, a
    preference). Keep each note short and self-contained.

    Args:
        note: The note, one fact or decision.
    """
    notebook = _notebook(ctx)
    stored = await notebook.remember(note)
    return ToolResult(content=f"Noted in memory ({notebook.scope.key}).", data={"id": stored.id, "scope": notebook.scope.key})


@tool
async def recall(
    ctx: ToolContext, query: Annotated[str, Field(max_length=1000)] = "", k: Annotated[int, Field(ge=1, le=20)] = 5
) -> ToolResult:
    """Look up notes in your long-term memory: those that best match the query, or the most
    recent ones when the query is empty or matches nothing.

    Args:
        query: What to look for.
        k: How many notes to return.
    """
    notebook = _notebook(ctx)
    notes = await notebook.recall(query, k)
    if not notes:
        return ToolResult(content=f"No notes in memory ({notebook.scope.key}).", data={"notes": []})
    lines = [f"- ({time.strftime('%Y-%m-%d', time.gmtime(n.created_at))}) {n.text}" for n in notes]
    return ToolResult(
        content=f"Notes from memory ({notebook.scope.key}):\n" + "\n".join(lines),
        data={"notes": [{"text": n.text, "created_at": n.created_at} for n in notes]},
        sources=tuple(MemoryStore.source_of(n) for n in notes),
    )


def _notebook(ctx: ToolContext) -> Notebook:
    if ctx.memory is None:
        raise ToolFailure("long-term memory is not available here (only agents have it)")
    return ctx.memory
