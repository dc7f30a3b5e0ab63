"""Built-in file tools, confined to the run's workspace (see :mod:`runner.tools.paths`)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from runner.errors import ToolFailure
from runner.tools.base import ToolContext, ToolResult, tool
from runner.tools.paths import (
    list_workspace_files,
    read_workspace_file,
    workspace_file_size,
    write_workspace_file,
)

MAX_READ_BYTES = 1_000_000
MAX_WRITE_BYTES = 10_000_000


@tool
def read_file(
    ctx: ToolContext, path: str, max_bytes: Annotated[int, Field(ge=1, le=MAX_READ_BYTES)] = 100_000
) -> ToolResult:
    """Read a text file from the workspace.

    Args:
        path: Path relative to the workspace, e.g. "data/notes.txt".
        max_bytes: Read at most this many bytes from the start of the file.
    """
    size = workspace_file_size(ctx.workspace, path)
    data = read_workspace_file(ctx.workspace, path, max_bytes)
    if b"\0" in data:
        raise ToolFailure(f"'{path}' is a binary file ({size} bytes); read_file returns text only")
    text = data.decode("utf-8", "replace")
    note = f"\n[truncated: showed {len(data)} of {size} bytes]" if len(data) < size else ""
    return ToolResult(content=text + note, data={"path": path, "size": size, "text": text})


@tool
def write_file(ctx: ToolContext, path: str, content: str) -> ToolResult:
    """Write a text file in the workspace, replacing it if it exists (parents are created).

    Args:
        path: Path relative to the workspace, e.g. "out/report.md".
        content: The complete text to write (UTF-8).
    """
    data = content.encode("utf-8")
    if len(data) > MAX_WRITE_BYTES:
        raise ToolFailure(f"content is {len(data)} bytes; the limit is {MAX_WRITE_BYTES}")
    write_workspace_file(ctx.workspace, path, data, quota_bytes=ctx.disk_quota_bytes)
    return ToolResult(content=f"wrote {len(data)} bytes to {path}", artifacts=[path])


@tool
def list_files(
    ctx: ToolContext,
    path: str = ".",
    recursive: bool = False,
    max_entries: Annotated[int, Field(ge=1, le=5000)] = 200,
) -> ToolResult:
    """List files and directories in the workspace (symbolic links are shown, not followed).

    Args:
        path: Directory relative to the workspace; "." is the workspace itself.
        recursive: Also list the contents of subdirectories.
        max_entries: Stop after this many entries.
    """
    entries = list_workspace_files(ctx.workspace, path, recursive=recursive, max_entries=max_entries)
    lines = [_line(e.path, e.kind, e.size) for e in entries] or ["(empty)"]
    if len(entries) >= max_entries:
        lines.append(f"[stopped after {max_entries} entries]")
    data = [{"path": e.path, "kind": e.kind, "size": e.size} for e in entries]
    return ToolResult(content="\n".join(lines), data=data)


def _line(path: str, kind: str, size: int) -> str:
    if kind == "dir":
        return f"{path}/"
    if kind == "file":
        return f"{path} ({size} bytes)"
    return f"{path} [{kind}]"
