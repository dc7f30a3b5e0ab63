"""Built-in ``search_knowledge``: the chunks of the agent's knowledge bases that best answer a
question, each with its citation (file, heading, position)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from runner.errors import ToolFailure
from runner.knowledge.base import Hit, reciprocal_rank_fusion
from runner.tools.base import ToolContext, ToolResult, tool

MAX_CHUNK_CHARS_SHOWN = 2000


@tool
async def search_knowledge(
    ctx: ToolContext,
    query: Annotated[str, Field(min_length=1, max_length=1000)],
    k: Annotated[int, Field(ge=1, le=20)] = 5,
    knowledge: str | None = None,
) -> ToolResult:
    """Search your knowledge bases (product docs, manuals, policies) and return the passages
    that best match, numbered, each with its source file, section and position.

    Cite what you use by its number and source, e.g. [2] docs/billing.md — Refunds.

    Args:
        query: The question or keywords to look up.
        k: How many passages to return.
        knowledge: Search only this knowledge base (default: all of yours).
    """
    bases = dict(ctx.knowledge)
    if not bases:
        raise ToolFailure("no knowledge base is available here; the agent or task must name one under knowledge:")
    if knowledge is not None:
        if knowledge not in bases:
            raise ToolFailure(f"unknown knowledge base '{knowledge}'; yours are: {', '.join(sorted(bases))}")
        bases = {knowledge: bases[knowledge]}
    found = {name: await base.search(query, k) for name, base in bases.items()}
    hits = _merged(found, k)
    return ToolResult(
        content=_render(query, hits),
        data={"query": query, "results": [_as_data(rank, name, hit) for rank, (name, hit) in enumerate(hits, 1)]},
        sources=tuple(hit.source for _, hit in hits),
    )


def _merged(found: dict[str, list[Hit]], k: int) -> list[tuple[str, Hit]]:
    """Hits of several bases in one ranking (reciprocal rank fusion over the bases)."""
    by_key = {(name, hit.chunk.id): (name, hit) for name, hits in found.items() for hit in hits}
    rankings = [[(name, hit.chunk.id) for hit in hits] for name, hits in found.items()]
    return [by_key[key] for key in reciprocal_rank_fusion(rankings)[:k]]


def _as_data(rank: int, name: str, hit: Hit) -> dict[str, Any]:
    return {
        "rank": rank, "knowledge": name, "source": hit.chunk.path, "heading": hit.chunk.heading,
        "position": hit.chunk.position, "citation": hit.source.citation(), "text": hit.chunk.text,
    }  # fmt: skip


def _render(query: str, hits: list[tuple[str, Hit]]) -> str:
    if not hits:
        return f'Nothing in the knowledge base matches "{query}". Try other words.'
    parts = [f"[{rank}] {hit.source.citation()}\n{hit.chunk.text[:MAX_CHUNK_CHARS_SHOWN]}" for rank, (_, hit) in enumerate(hits, 1)]
    return "\n\n".join(parts)
