"""Functions used as custom ``python`` tools in the tests (imported by path)."""

from __future__ import annotations

from runner.errors import ToolFailure
from runner.tools.base import ToolContext, tool


def word_count(ctx: ToolContext, path: str, min_length: int = 1) -> dict[str, int]:
    """Count the words of a workspace file.

    Args:
        path: File relative to the workspace.
        min_length: Only count words at least this long.
    """
    if ".." in path:
        raise ToolFailure("no")
    words = (ctx.workspace / path).read_text().split()
    return {"words": sum(1 for w in words if len(w) >= min_length)}


@tool
async def shout(text: str) -> str:
    """Upper-case the text.

    Args:
        text: What to shout.
    """
    return text.upper()


NOT_CALLABLE = 3
