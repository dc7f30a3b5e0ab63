"""A small MCP server over stdio for the McpToolset tests (run as a script)."""

from __future__ import annotations

import os
import time

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("echo")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def environment() -> str:
    """The names of the environment variables this server sees, comma-separated."""
    return ",".join(sorted(os.environ))


@server.tool()
def process_id() -> str:
    """The server's process id."""
    return str(os.getpid())


@server.tool()
def fail(message: str) -> str:
    """Always fails with ``message``."""
    raise ToolError(message)


@server.tool()
def sleep(seconds: float) -> str:
    """Sleep, then answer."""
    time.sleep(seconds)
    return "awake"


if __name__ == "__main__":
    server.run("stdio")
