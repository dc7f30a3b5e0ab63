"""The tools one agent may use, bound to its run's workspace and its confinement settings."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from runner.config.specs import AgentSpec
from runner.errors import InvalidToolCall
from runner.tools.base import ToolContext, ToolResult
from runner.tools.registry import ToolRegistry
from runner.tools.sql.source import SqlSources


def tool_context(
    workspace: Path, agent: AgentSpec | None, secrets: Sequence[str], sql: SqlSources | None = None
) -> ToolContext:
    """A :class:`ToolContext` from trusted configuration only (never from model output);
    ``sql``: the SQL sources of the run's task."""
    from runner.tools.net import NetworkPolicy
    from runner.tools.sandbox_policy import SandboxPolicy

    sql = sql or SqlSources()
    if agent is None:
        return ToolContext(workspace=workspace, secrets=tuple(secrets), sql=sql)
    return ToolContext(
        sql=sql,
        workspace=workspace,
        sandbox=SandboxPolicy(**agent.sandbox),
        network=NetworkPolicy(
            allow_hosts=agent.allow_hosts, deny_hosts=agent.deny_hosts, allow_private_networks=agent.allow_private_networks
        ),
        settings={ref.name: ref.settings for ref in agent.tools},
        secrets=tuple(secrets),
    )


class ToolBox:
    """The loop's view of tools: only the agent's own, by name."""

    def __init__(self, registry: ToolRegistry, agent: AgentSpec, context: ToolContext | None):
        self.registry, self.context = registry, context
        self.allowed = _expand(registry, [ref.name for ref in agent.tools])
        self._schemas = tuple(registry.openai_tools(self.allowed)) if self.allowed else ()

    def schemas(self) -> tuple[dict[str, Any], ...]:
        return self._schemas

    def terminates(self, name: str) -> bool:
        return name in self.registry and self.registry.get(name).terminates

    async def call(self, name: str, arguments: str, deadline: float | None = None) -> ToolResult:
        if name not in self.allowed:
            available = ", ".join(self.allowed) or "none"
            raise InvalidToolCall(f"unknown tool '{name}'; the tools available to you are: {available}")
        assert self.context is not None  # an agent with tools always has a context
        context = self.context if deadline is None else replace(self.context, deadline=deadline)
        return await self.registry.invoke(name, arguments, context)


def _expand(registry: ToolRegistry, names: list[str]) -> list[str]:
    """Tool names, with an MCP server's name standing for all of its tools (``server__*``)."""
    out: list[str] = []
    for name in names:
        if name in registry:
            out.append(name)
        else:
            out.extend(n for n in registry.names() if n.startswith(name + "__"))
    return list(dict.fromkeys(out))
