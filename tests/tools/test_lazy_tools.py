"""Tools are built when first used: names and settings are known without building, a run
builds only what it uses, and quick sync tools run without a thread hop."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from runner.errors import ConfigError, ToolFailure
from runner.tools.base import Tool, ToolContext, tool
from runner.tools.builtins import BUILTINS, builtin_names, builtin_tools
from runner.tools.registry import ToolRegistry, UnknownTool, default_registry
from runner.tools.settings import NO_SETTINGS

REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(REPO)}


def loaded_after(code: str, cwd: Path = REPO) -> list[str]:
    """The runner tool modules a fresh interpreter has imported after running ``code``."""
    probe = code + "\nimport sys\nprint(sorted(m for m in sys.modules if m.startswith('runner.tools.builtins.')))"
    done = subprocess.run([sys.executable, "-c", probe], cwd=cwd, env=ENV, capture_output=True, text=True, check=True)
    return eval(done.stdout.strip().splitlines()[-1])  # a printed list of module names


def test_the_table_describes_every_built_tool() -> None:
    built = {tool.name: tool for tool in builtin_tools()}
    assert sorted(built) == builtin_names() == sorted(entry.name for entry in BUILTINS)
    for entry in BUILTINS:
        tool_ = built[entry.name]
        assert tool_.settings_schema == entry.settings_schema, entry.name
        assert tool_.source == entry.source, entry.name


def test_names_and_settings_come_without_building() -> None:
    code = (
        "from runner.tools.registry import default_registry\n"
        "registry = default_registry()\n"
        "assert 'python' in registry and registry.names()\n"
        "assert registry.settings_schema('python')['properties']['timeout_seconds']\n"
    )
    assert loaded_after(code) == []


def test_looking_a_tool_up_builds_that_tool_only() -> None:
    code = "from runner.tools.registry import default_registry\ndefault_registry().get('calculator')\n"
    assert loaded_after(code) == ["runner.tools.builtins.calculator"]


@pytest.mark.parametrize("command", ["list", "validate"])
def test_list_and_validate_build_only_the_tools_of_tool_steps(command: str) -> None:
    """Checking a project builds no agent's tool: only those a pipeline's tool step names, whose
    declared arguments are checked against the tool's own schema (config/tool_step_args.py)."""
    import yaml

    stepped = {
        step["tool"]
        for path in (REPO / "tasks.d").glob("*.yaml")
        for step in (yaml.safe_load(path.read_text()).get("pipeline") or {}).get("steps", [])
        if "tool" in step
    }
    allowed = {f"runner.tools.builtins.{entry.module}" for entry in BUILTINS if entry.name in stepped}
    code = f"from runner.cli import main\ntry:\n    main([{command!r}])\nexcept SystemExit as done:\n    assert done.code == 0, done.code\n"
    loaded = set(loaded_after(code))
    assert loaded <= allowed, loaded - allowed
    assert "runner.tools.builtins.python" not in loaded and "runner.tools.builtins.browse" not in loaded


def test_a_tool_is_built_once() -> None:
    builds: list[str] = []

    def build() -> Tool:
        builds.append("built")
        return greet

    registry = ToolRegistry()
    registry.register_lazy("greet", "tests:greet", NO_SETTINGS, build)
    assert builds == [] and registry.names() == ["greet"]
    assert registry.get("greet") is registry.get("greet") is greet
    assert builds == ["built"]


def test_a_lazy_tool_that_builds_another_name_is_an_error() -> None:
    registry = ToolRegistry()
    registry.register_lazy("hello", "tools.d/hello.yaml:1", NO_SETTINGS, lambda: greet)
    with pytest.raises(ConfigError, match=r"tools.d/hello.yaml:1: registered as tool 'hello' but builds tool 'greet'"):
        registry.get("hello")


def test_lazy_and_built_tools_share_one_namespace() -> None:
    registry = default_registry()
    with pytest.raises(ConfigError, match=r"tool 'calculator' is defined twice: runner\.tools\.builtins\.calculator"):
        registry.register_lazy("calculator", "tools.d/calc.yaml:1", NO_SETTINGS, lambda: greet)
    with pytest.raises(ConfigError, match="must match"):
        registry.register_lazy("bad name", "tools.d/x.yaml:1", NO_SETTINGS, lambda: greet)
    with pytest.raises(UnknownTool, match="Did you mean 'calculator'"):
        registry.settings_schema("calculater")


@tool
def greet(name: str) -> str:
    """Greet someone.

    Args:
        name: Who.
    """
    return f"hello {name} from {threading.current_thread().name}"


@tool(blocking=False)
def quick(name: str) -> str:
    """Greet quickly.

    Args:
        name: Who.
    """
    return f"hi {name} from {threading.current_thread().name}"


class NoThreads(concurrent.futures.ThreadPoolExecutor):
    """A default executor that refuses work: any thread hop fails the call."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[Any]:
        raise RuntimeError("no thread was expected here")


async def call_without_threads(tool_: Tool, ctx: ToolContext, arguments: dict[str, Any]) -> str:
    asyncio.get_running_loop().set_default_executor(NoThreads())
    result = await ToolRegistry([tool_]).invoke(tool_.name, arguments, ctx)
    return result.content


async def test_a_sync_tool_runs_in_a_worker_thread_by_default(ctx: ToolContext) -> None:
    result = await ToolRegistry([greet]).invoke("greet", {"name": "ann"}, ctx)
    assert threading.main_thread().name not in result.content
    with pytest.raises(ToolFailure, match="RuntimeError: no thread was expected"):  # the registry reports it
        await call_without_threads(greet, ctx, {"name": "ann"})


@pytest.mark.parametrize(
    ("name", "arguments", "expected"),
    [
        ("quick", {"name": "bo"}, f"hi bo from {threading.main_thread().name}"),
        ("calculator", {"expression": "(3 + 4) * 6"}, "(3 + 4) * 6 = 42"),
        ("terminate", {"answer": "done"}, "done"),
    ],
)
async def test_quick_sync_tools_run_on_the_event_loop(ctx: ToolContext, name: str, arguments: dict[str, Any], expected: str) -> None:
    tool_ = quick if name == "quick" else default_registry().get(name)
    assert await call_without_threads(tool_, ctx, arguments) == expected


async def test_a_quick_tool_still_reports_failures(ctx: ToolContext) -> None:
    from runner.errors import ToolFailure

    with pytest.raises(ToolFailure, match="division by zero"):
        await call_without_threads(default_registry().get("calculator"), ctx, {"expression": "1 / 0"})
