"""Tools the agents call: the registry, the @tool decorator, built-ins, custom tools, the sandbox.

Importing this package is cheap: pandas, matplotlib, httpx and mcp are imported only
when a tool that needs them runs.
"""

from runner.tools.base import Tool, ToolContext, ToolKind, ToolResult, tool, tool_from_function
from runner.tools.custom import McpToolset, build_custom_tool
from runner.tools.net import NetworkPolicy
from runner.tools.registry import ToolRegistry, UnknownTool, default_registry
from runner.tools.sandbox import SandboxPolicy, ensure_sandbox, prepare_workspace, probe_sandbox

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
