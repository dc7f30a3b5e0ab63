"""Built-in ``shell``: run a shell command in the OS sandbox."""

from __future__ import annotations

from runner.tools.base import ToolContext, ToolResult, tool
from runner.tools.outcomes import command_outcome, policy_with_settings
from runner.tools.sandbox import run_command


@tool(name="shell", needs_sandbox=True)
def run_shell(ctx: ToolContext, command: str) -> ToolResult:
    """Run a command with /bin/sh in an isolated sandbox and return its output.

    The working directory is the run's workspace. There is no network access; only
    programs installed under /usr are available.

    Args:
        command: The shell command line to run.
    """
    policy = policy_with_settings(ctx.sandbox, ctx.settings_for("shell"), ctx.deadline)
    return command_outcome(run_command(["/bin/sh", "-c", command], ctx.workspace, policy))
