"""What a pipeline needs from the run it belongs to. The run hands one in
(:class:`runner.runs.steps.StepRunner`); pipelines never import the run machinery."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from runner.config.specs import AgentSpec, Caps, ToolRef
from runner.core.steps import StepKind, StepRecord


class StepHost(Protocol):
    """Runs steps inside one run and remembers how each ended."""

    @property
    def done(self) -> Mapping[str, StepRecord]:
        """Every step finished so far (this attempt's, and those reused from earlier attempts)."""

    def agent(self, name: str) -> AgentSpec: ...

    def template_context(self, visible: set[str] | None = None) -> dict[str, Any]: ...

    async def run_agent(
        self,
        step_id: str,
        kind: StepKind,
        agent_name: str,
        goal_template: str,
        *,
        visible: set[str] | None,
        tools: tuple[ToolRef, ...] | None = None,
        caps: Caps | None = None,
        output_schema: dict[str, Any] | None = None,
        literal_goal: bool = False,
    ) -> StepRecord: ...

    async def run_tool(self, step_id: str, tool_name: str, args: dict[str, Any], visible: set[str]) -> StepRecord: ...

    def skip(self, step_id: str, kind: StepKind, reason: str) -> StepRecord:
        """Record a step that will not run (a dependency did not complete, or a cap halted the run)."""

    def record_plan(self, plan: Any, reason: str | None, *, attempt: int, problems: list[str]) -> None: ...
