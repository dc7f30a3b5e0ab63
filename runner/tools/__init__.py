"""Tools the agents call: the registry, the @tool decorator, built-ins, custom tools, the sandbox.

Importing this package is cheap: its names are imported from their modules on first use
(``runner validate`` reads the built-in tools' names from :mod:`runner.tools.builtins`
without building a tool), and pandas, matplotlib, httpx and mcp are imported only when a
tool that needs them runs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from runner.tools.base import Tool, ToolContext, ToolKind, ToolResult, tool, tool_from_function
    from runner.tools.custom import McpToolset, build_custom_tool
    from runner.tools.net import NetworkPolicy
    from runner.tools.registry import ToolRegistry, UnknownTool, default_registry
    from runner.tools.sandbox import SandboxPolicy, ensure_sandbox, prepare_workspace, probe_sandbox

_EXPORTS = {
    "McpToolset": "runner.tools.custom",
    "NetworkPolicy": "runner.tools.net",
    "SandboxPolicy": "runner.tools.sandbox",
    "Tool": "runner.tools.base",
    "ToolContext": "runner.tools.base",
    "ToolKind": "runner.tools.base",
    "ToolRegistry": "runner.tools.registry",
    "ToolResult": "runner.tools.base",
    "UnknownTool": "runner.tools.registry",
    "build_custom_tool": "runner.tools.custom",
    "default_registry": "runner.tools.registry",
    "ensure_sandbox": "runner.tools.sandbox",
    "prepare_workspace": "runner.tools.sandbox",
    "probe_sandbox": "runner.tools.sandbox",
    "tool": "runner.tools.base",
    "tool_from_function": "runner.tools.base",
}

__all__ = [
    "McpToolset",
    "NetworkPolicy",
    "SandboxPolicy",
    "Tool",
    "ToolContext",
    "ToolKind",
    "ToolRegistry",
    "ToolResult",
    "UnknownTool",
    "build_custom_tool",
    "default_registry",
    "ensure_sandbox",
    "prepare_workspace",
    "probe_sandbox",
    "tool",
    "tool_from_function",
]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
