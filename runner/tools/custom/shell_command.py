"""Custom ``shell`` tools: an argv template run in the sandbox, never through a shell.

Each ``{param}`` in the template is replaced by the argument's value within its own argv
element, so an argument can never become two arguments or shell syntax. A string
argument standing alone in an element may not start with ``-`` (it would be read as an
option) unless the parameter has an ``enum``.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from runner.errors import ConfigError, ToolFailure
from runner.tools.arguments import PydanticArguments
from runner.tools.base import Tool, ToolContext, ToolResult
from runner.tools.outcomes import command_outcome, policy_with_settings
from runner.tools.sandbox import run_command

PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


def build_shell_tool(data: Mapping[str, Any], source: str) -> Tool:
    """The tool a ``type: shell`` document declares."""
    name = data["name"]
    template: list[str] = list(data["shell"]["command"])
    parameters: Mapping[str, Mapping[str, Any]] = data.get("parameters", {})
    for element in template:
        for placeholder in PLACEHOLDER.findall(element):
            if placeholder not in parameters:
                raise ConfigError(
                    f"{source}: shell.command uses {{{placeholder}}} but no parameter "
                    f"'{placeholder}' is declared (parameters: {', '.join(parameters) or 'none'})"
                )
    timeout = data["shell"].get("timeout_seconds")
    free_strings = {
        p for p, spec in parameters.items() if spec.get("type", "string") == "string" and "enum" not in spec
    }

    async def run(ctx: ToolContext, arguments: dict[str, Any]) -> ToolResult:
        argv = render_argv(template, arguments, free_strings)
        policy = policy_with_settings(ctx.sandbox, ctx.settings_for(name), ctx.deadline)
        if timeout is not None and "timeout_seconds" not in ctx.settings_for(name):
            policy = replace(policy, wall_seconds=float(timeout))
        result = await asyncio.to_thread(run_command, argv, ctx.workspace, policy)
        return command_outcome(result)

    description = data.get("description") or f"Run {' '.join(template)}"
    return Tool(
        name=name,
        description=description,
        arguments=PydanticArguments.from_parameters(name, parameters, description),
        run=run,
        kind="shell",
        source=source,
        needs_sandbox=True,
    )


def render_argv(template: Sequence[str], arguments: Mapping[str, Any], free_strings: set[str]) -> list[str]:
    """Substitute ``arguments`` into ``template``; each element stays one argv element."""
    argv = []
    for element in template:
        standalone = PLACEHOLDER.fullmatch(element)
        if standalone and standalone.group(1) in free_strings:
            value = _text(arguments[standalone.group(1)])
            if value.startswith("-"):
                raise ToolFailure(
                    f"argument '{standalone.group(1)}' may not start with '-' "
                    f"(it would be read as an option): {value!r}"
                )
        argv.append(PLACEHOLDER.sub(lambda m: _text(arguments[m.group(1)]), element))
    return argv


def _text(value: Any) -> str:
    if isinstance(value, bool | None):
        return json.dumps(value)
    text = str(value)
    if "\0" in text:
        raise ToolFailure("arguments may not contain NUL bytes")
    return text
