"""Turn a sandboxed command's outcome into what the model sees.

A command that exits 0 is a result; anything else (non-zero exit, a limit, a timeout,
an output flood) is a :class:`~runner.errors.ToolFailure` carrying the same rendering,
so deterministic pipeline steps fail while the model still sees the output.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from runner.errors import ToolFailure
from runner.tools.base import ToolResult
from runner.tools.sandbox import CommandResult, SandboxPolicy


def command_outcome(result: CommandResult) -> ToolResult:
    """A ToolResult for a successful command; raise ToolFailure otherwise."""
    if not result.ok:
        raise ToolFailure(result.render())
    data = {"exit_code": result.exit_code, "stdout": result.stdout, "stderr": result.stderr}
    return ToolResult(content=result.render(), data=data)


def policy_with_settings(policy: SandboxPolicy, settings: Mapping[str, Any], deadline: float | None = None) -> SandboxPolicy:
    """``policy`` with a per-tool ``timeout_seconds`` setting applied as the wall-clock limit,
    never past ``deadline`` (``time.monotonic()``: the run's wall-clock cap)."""
    timeout = settings.get("timeout_seconds")
    if timeout is not None:
        policy = replace(policy, wall_seconds=float(timeout))
    if deadline is not None:
        policy = replace(policy, wall_seconds=max(min(policy.wall_seconds, deadline - time.monotonic()), 0.01))
    return policy
