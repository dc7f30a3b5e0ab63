"""Custom ``mcp`` tools: the tools of an MCP server started over stdio for one run.

``async with McpToolset(data, source) as tools:`` starts the server, lists its tools
(keeping those in the ``tools`` allow-list, if given) and yields them as
:class:`~runner.tools.base.Tool` values named ``<server>__<tool>`` with the server's
input schema. Leaving the block stops the server (the SDK closes stdin, then terminates
the process group); the tools then refuse further calls.

The server's environment is only ``PATH`` plus the keys declared in ``env``: the SDK
adds a few variables of its own (HOME, USER, …), which are unset again by starting the
command through ``env -u``. The server is project configuration, not model code, so it
is not sandboxed.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from collections.abc import Mapping
from contextlib import AsyncExitStack
from types import TracebackType
from typing import Any, TextIO

from runner.errors import ConfigError, ToolFailure
from runner.tools.arguments import JsonSchemaArguments
from runner.tools.base import Tool, ToolContext, ToolResult

_SDK_DEFAULT_ENV = ("HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER")
_INVALID_NAME_CHARS = re.compile(r"[^a-zA-Z0-9_-]")
_MAX_TOOL_NAME = 64


class McpToolset:
    """An MCP server's tools for the lifetime of an ``async with`` block."""

    def __init__(
        self,
        data: Mapping[str, Any],
        source: str,
        *,
        call_timeout_seconds: float = 120.0,
        errlog: TextIO | None = None,
    ):
        self.server = str(data["name"])
        self.source = source
        self._spec = data["mcp"]
        self._call_timeout = call_timeout_seconds
        self._errlog = errlog
        self._client: Any = None
        self._stack: AsyncExitStack | None = None

    async def __aenter__(self) -> list[Tool]:
        try:
            from mcp import Client, stdio_client
        except ImportError:
            raise ConfigError(f"{self.source}: MCP tools need the 'mcp' package (pip install 'runner[mcp]')") from None
        stack = AsyncExitStack()
        try:
            transport = stdio_client(self._parameters(), errlog=self._errlog or sys.stderr)
            client = Client(transport, read_timeout_seconds=self._call_timeout)
            self._client = await stack.enter_async_context(client)
            tools = await self._list_tools()
        except BaseException as error:
            self._client = None
            await stack.aclose()
            reason = _startup_failure(error)
            if reason is None:
                raise
            raise ConfigError(
                f"{self.source}: cannot start MCP server '{self.server}' ({' '.join(self._spec['command'])}): {reason}"
            ) from None
        self._stack = stack
        return tools

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """Stop the server. An exception from the ``async with`` body propagates unchanged
        (it is not handed to the SDK's task groups, which would wrap it in an ExceptionGroup)."""
        self._client = None
        stack, self._stack = self._stack, None
        if stack is None:
            return
        try:
            await stack.aclose()
        except BaseException:
            if exc is None:
                raise
            # the body's own exception is the one to report; it propagates after this

    def _parameters(self) -> Any:
        from mcp import StdioServerParameters

        command = list(self._spec["command"])
        declared = dict(self._spec.get("env", {}))
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **declared}
        env_program = shutil.which("env") or "/usr/bin/env"
        unset = [arg for key in _SDK_DEFAULT_ENV if key not in env for arg in ("-u", key)]
        return StdioServerParameters(command=env_program, args=[*unset, "--", *command], env=env)

    async def _list_tools(self) -> list[Tool]:
        listed = []
        cursor = None
        while True:
            page = await self._client.list_tools(cursor=cursor)
            listed.extend(page.tools)
            cursor = page.next_cursor
            if cursor is None:
                break
        allowed = self._spec.get("tools")
        names = [t.name for t in listed]
        if allowed is not None:
            missing = [name for name in allowed if name not in names]
            if missing:
                raise ConfigError(
                    f"{self.source}: MCP server '{self.server}' has no tool "
                    f"{', '.join(missing)} (it offers: {', '.join(names) or 'none'})"
                )
            listed = [t for t in listed if t.name in allowed]
        return [self._tool(t.name, t.description or "", t.input_schema) for t in listed]

    def _tool(self, remote: str, description: str, schema: dict[str, Any]) -> Tool:
        name = _INVALID_NAME_CHARS.sub("_", f"{self.server}__{remote}")
        if len(name) > _MAX_TOOL_NAME:
            raise ConfigError(
                f"{self.source}: tool name '{name}' is longer than {_MAX_TOOL_NAME} characters; shorten the server name"
            )

        async def run(ctx: ToolContext, arguments: dict[str, Any]) -> ToolResult:
            return await self._call(remote, arguments)

        arguments = JsonSchemaArguments({"type": "object", **schema})
        if (problem := arguments.schema_problem()) is not None:
            raise ConfigError(
                f"{self.source}: MCP server '{self.server}' describes tool '{remote}' with an input schema that is not "
                f"valid JSON Schema: {problem}; fix the server, or list the tools you use under mcp.tools to leave it out"
            )
        return Tool(
            name=name,
            description=description or f"{remote} (MCP server {self.server})",
            arguments=arguments,
            run=run,
            kind="mcp",
            source=f"{self.source} ({self.server}:{remote})",
        )

    async def _call(self, remote: str, arguments: dict[str, Any]) -> ToolResult:
        import anyio
        from mcp import MCPError

        client = self._client
        if client is None:
            raise ToolFailure(f"MCP server '{self.server}' is not running (its toolset is closed)")
        try:
            result = await client.call_tool(remote, arguments)
        except (MCPError, TimeoutError, anyio.BrokenResourceError, anyio.ClosedResourceError) as error:
            raise ToolFailure(f"MCP server '{self.server}' failed on {remote}: {error}") from None
        text = "\n".join(_block_text(block) for block in result.content)
        if result.is_error:
            raise ToolFailure(f"{remote} reported an error: {text}")
        return ToolResult(content=text, data=result.structured_content)


def _startup_failure(error: BaseException) -> str | None:
    """Why the server could not start, if ``error`` (or every error in a group) says so."""
    from mcp import MCPError

    leaves = _leaf_exceptions(error)
    if leaves and all(isinstance(leaf, MCPError | OSError) for leaf in leaves):
        return "; ".join(str(leaf) for leaf in leaves)
    return None


def _leaf_exceptions(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in _leaf_exceptions(inner)]
    return [error]


def _block_text(block: Any) -> str:
    if getattr(block, "type", None) == "text":
        return str(block.text)
    return f"[{getattr(block, 'type', 'unknown')} content omitted]"
