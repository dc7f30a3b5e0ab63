"""Built-in ``terminate``: the model's way to finish the run with its answer."""

from __future__ import annotations

from typing import Literal

from runner.tools.base import ToolResult, tool


@tool(terminates=True, blocking=False)  # returns its arguments: no thread needed
def terminate(answer: str, status: Literal["success", "failure"] = "success") -> ToolResult:
    """Finish the task and give the final answer. Call this once, when you are done.

    Args:
        answer: The final answer or result of the task.
        status: "success" if the task was accomplished, "failure" if it could not be.
    """
    return ToolResult(content=answer, data={"answer": answer, "status": status})
