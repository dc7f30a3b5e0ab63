"""``runner validate``: the declared arguments of a tool step against the tool's argument schema.

A pipeline step ``{tool: query_table, args: {...}}`` is validated as a run would validate the
call (the tool's own schema), at the place of each bad value, so ``op: "=>"`` is refused
before a run instead of failing its step. A string that is a template (``{{ inputs.date }}``)
is only known when a run renders it: problems at or inside one are left to the run. MCP tools
have no schema until their server is started, so their steps are not checked here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from runner.config.documents import escape_pointer_token

if TYPE_CHECKING:
    from runner.config.project import Project
    from runner.tools.base import Tool


def tool_for_step(project: Project, name: str) -> Tool | None:
    """The tool ``name`` (built-in or from tools.d) with its argument schema; ``None`` for a tool
    whose schema is not known before a run (MCP) or that cannot be built (validate says why elsewhere)."""
    from runner.errors import ConfigError
    from runner.tools.builtins import BUILTINS

    builtin = next((entry for entry in BUILTINS if entry.name == name), None)
    if builtin is not None:
        return builtin.build()
    spec = project.tools.get(name)
    if spec is None or spec.data.get("type") == "mcp":
        return None
    from runner.tools.custom import build_custom_tool

    try:
        return build_custom_tool(spec.data, name)
    except ConfigError:
        return None


def argument_problems(tool: Tool, args: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(pointer under args, message)`` for each declared argument the tool refuses."""
    from runner.tools.arguments import ArgumentsInvalid

    try:
        tool.arguments.validate(dict(args))
    except ArgumentsInvalid as invalid:
        return [
            (_pointer(path), f"invalid argument for tool '{tool.name}': {message}")
            for path, message in invalid.located
            if not _templated_at(args, path)
        ]
    return []


def _templated_at(args: Any, path: tuple[Any, ...]) -> bool:
    """Whether the value at ``path`` (or a value on the way to it) is a template string."""
    value = args
    for key in path:
        if _is_template(value):
            return True
        inside = key in value if isinstance(value, Mapping) else (
            isinstance(value, list) and isinstance(key, int) and 0 <= key < len(value))
        if not inside:
            return False
        value = value[key]
    return _is_template(value)


def _is_template(value: Any) -> bool:
    return isinstance(value, str) and ("{{" in value or "{%" in value)


def _pointer(path: tuple[Any, ...]) -> str:
    return "".join(f"/{escape_pointer_token(str(key))}" for key in path)
