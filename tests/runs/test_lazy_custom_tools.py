"""A run builds the custom tools its agents use, and only those."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.config.project import load_project_or_raise
from runner.errors import ConfigError
from runner.model.factory import ModelPool
from runner.model.scripted import ScriptedModel
from runner.runs.execute import execute_task
from runner.runs.options import RunOptions

BROKEN_TOOL = """\
apiVersion: runner/v1
kind: Tool
name: broken
description: A tool whose module is missing.
type: python
python: {function: "no_such_module_here:go"}
"""
USER = """\
apiVersion: runner/v1
kind: Agent
name: user_of_broken
model: {id: gpt-4o-mini, max_tokens: 100}
tools: [broken]
---
apiVersion: runner/v1
kind: Task
name: use_broken
agent: user_of_broken
goal: Use the tool.
"""


@pytest.fixture
def with_broken_tool(project_dir: Path) -> Path:
    (project_dir / "tools.d").mkdir()
    (project_dir / "tools.d/broken.yaml").write_text(BROKEN_TOOL)
    (project_dir / "agents.d/user.yaml").write_text(USER)
    return project_dir


async def test_a_custom_tool_the_task_does_not_use_is_never_built(with_broken_tool: Path) -> None:
    project = load_project_or_raise(with_broken_tool)
    options = RunOptions(write_report=False)
    model = ScriptedModel({"fallback": {"content": "4"}})
    result = await execute_task(project, project.task_for("sum"), {"a": "2"}, options, pool=ModelPool(fixed=model))
    assert result.status == "completed" and result.output == "4"


async def test_a_custom_tool_the_task_uses_is_built_before_the_run_starts(with_broken_tool: Path) -> None:
    project = load_project_or_raise(with_broken_tool)
    model = ScriptedModel({"fallback": {"content": "never asked"}})
    with pytest.raises(ConfigError, match=r"tools.d/broken.yaml:1: cannot import module 'no_such_module_here'"):
        await execute_task(project, project.task_for("use_broken"), {}, RunOptions(), pool=ModelPool(fixed=model))
    assert model.requests == []
