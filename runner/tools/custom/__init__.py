"""Custom tools declared in ``tools.d/*.yaml``, built from the config layer's plain dicts.

``build_custom_tool(data, source)`` turns a ``python``, ``shell`` or ``http`` tool
document into a :class:`~runner.tools.base.Tool`. ``mcp`` servers have a lifecycle (a
process per run) and are opened with ``async with McpToolset(data, source) as tools``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from runner.errors import ConfigError
from runner.tools.base import Tool
from runner.tools.custom.http_endpoint import build_http_tool
from runner.tools.custom.mcp_server import McpToolset
from runner.tools.custom.python_function import build_python_tool
from runner.tools.custom.shell_command import build_shell_tool
from runner.tools.settings import custom_settings_schema

__all__ = ["McpToolset", "build_custom_tool"]


def build_custom_tool(data: Mapping[str, Any], source: str) -> Tool:
    """Build the tool a ``python``, ``shell`` or ``http`` tool document declares, with the
    settings its type and its document declare."""
    return dataclasses.replace(_build(data, source), settings_schema=custom_settings_schema(data))


def _build(data: Mapping[str, Any], source: str) -> Tool:
    kind = data.get("type")
    if kind == "python":
        return build_python_tool(data, source)
    if kind == "shell":
        return build_shell_tool(data, source)
    if kind == "http":
        return build_http_tool(data, source)
    if kind == "mcp":
        raise ConfigError(f"{source}: MCP tools are opened per run with McpToolset, not built")
    raise ConfigError(f"{source}: unknown tool type {kind!r} (python, shell, http or mcp)")
