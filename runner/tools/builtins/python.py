"""Built-in ``python``: run model-written Python in the OS sandbox."""

from __future__ import annotations

from runner.tools.base import ToolContext, ToolResult, tool
from runner.tools.outcomes import command_outcome, policy_with_settings
from runner.tools.sandbox import SYSTEM_PYTHON, run_command


@tool(name="python", needs_sandbox=True)
def run_python(ctx: ToolContext, code: str) -> ToolResult:
    """Run a Python 3 program in an isolated sandbox and return its output.

    The working directory is the run's workspace; files written there persist between
    calls. There is no network access and only the standard library is available (use
    the table tools for data analysis). Print what you want to see.

    Args:
        code: The complete Python program to run; use print() for output.
    """
    settings = ctx.settings_for("python")
    interpreter = str(settings.get("interpreter", SYSTEM_PYTHON))
    policy = policy_with_settings(ctx.sandbox, settings, ctx.deadline)
    result = run_command([interpreter, "-"], ctx.workspace, policy, stdin=code.encode())
    return command_outcome(result)
