"""The @tool decorator, the registry and invoke()."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from typing import Literal

import pytest

from runner.errors import ConfigError, ToolFailure
from runner.tools.base import Tool, ToolContext, ToolResult, tool
from runner.tools.docstrings import parse_docstring
from runner.tools.registry import TOOL_NAME, ToolRegistry, UnknownTool, default_registry

pytestmark = pytest.mark.timeout(60)


@tool
def greet(ctx: ToolContext, name: str, times: int = 1, tone: Literal["warm", "dry"] = "warm") -> str:
    """Greet someone.

    Longer explanation of the greeting.

    Args:
        name: Who to greet.
        times: How many times
            to repeat the greeting.
        tone: The tone of voice.

    Returns:
        The greeting.
    """
    return " ".join([f"hello {name}"] * times) + f" ({tone}, thread {threading.current_thread().name})"


@tool(name="async_echo", terminates=True)
async def echo(value: float, tags: list[str] | None = None) -> dict[str, object]:
    """Echo the value back.

    :param value: A number.
    :param tags: Optional labels.
    """
    return {"value": value, "tags": tags or []}


def test_schema_comes_from_signature_and_docstring():
    assert isinstance(greet, Tool)
    assert greet.description == "Greet someone.\n\nLonger explanation of the greeting."
    assert greet.parameters == {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "name": {"type": "string", "description": "Who to greet."},
            "times": {"type": "integer", "default": 1, "description": "How many times to repeat the greeting."},
            "tone": {"type": "string", "enum": ["warm", "dry"], "default": "warm", "description": "The tone of voice."},
        },
        "required": ["name"],
    }
    assert greet.source == f"{__name__}:greet"
    assert greet.kind == "builtin" and not greet.terminates


def test_sphinx_docstrings_and_decorator_options():
    assert echo.name == "async_echo" and echo.terminates
    assert echo.parameters["properties"]["value"]["description"] == "A number."
    assert echo.parameters["properties"]["tags"]["description"] == "Optional labels."


def test_docstring_parser_stops_at_other_sections():
    doc = parse_docstring(
        "Summary.\n\nArgs:\n    a (int): First.\n    b: Second\n        continued.\n\nRaises:\n    ValueError: never."
    )
    assert doc.description == "Summary."
    assert doc.params == {"a": "First.", "b": "Second continued."}


async def test_invoke_coerces_and_runs_sync_tools_in_a_worker_thread(ctx):
    registry = ToolRegistry([greet])
    result = await registry.invoke("greet", '{"name": "Ada", "times": "2"}', ctx)
    assert result.content.startswith("hello Ada hello Ada (warm")
    assert threading.current_thread().name not in result.content


async def test_invoke_async_tool_keeps_structured_data(ctx):
    result = await ToolRegistry([echo]).invoke("async_echo", {"value": "1.5"}, ctx)
    assert result.data == {"value": 1.5, "tags": []}
    assert json.loads(result.content) == {"value": 1.5, "tags": []}


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ('{"name": "Ada", "times": "many"}', "/times: Input should be a valid integer"),
        ('{"times": 2}', "/name: Field required"),
        ('{"name": "Ada", "colour": "red"}', "/colour: Extra inputs are not permitted"),
        ('{"name": "Ada", "tone": "loud"}', "/tone: Input should be 'warm' or 'dry'"),
        ('{"name": "Ada",}', "not valid JSON"),
        ('["Ada"]', "must be a JSON object, got list"),
        ('{"name": NaN}', "not valid JSON"),
    ],
)
async def test_bad_arguments_tell_the_model_what_to_fix(ctx, arguments, expected):
    with pytest.raises(ToolFailure) as failure:
        await ToolRegistry([greet]).invoke("greet", arguments, ctx)
    message = str(failure.value)
    assert expected in message
    assert "Expected arguments (JSON Schema)" in message
    assert '"required": ["name"]' in message


async def test_empty_arguments_mean_no_arguments(ctx):
    result = await default_registry().invoke("current_time", "", ctx)
    assert result.data["timezone"] == "UTC"


def test_duplicate_names_are_an_error_naming_both_sources():
    other = Tool(name="greet", description="", arguments=greet.arguments, run=greet.run, source="tools.d/greet.yaml:3")
    registry = ToolRegistry([greet])
    with pytest.raises(ConfigError) as error:
        registry.register(other)
    assert f"{__name__}:greet" in str(error.value) and "tools.d/greet.yaml:3" in str(error.value)


def test_invalid_names_are_refused():
    bad = Tool(name="has space", description="", arguments=greet.arguments, run=greet.run, source="x.yaml:1")
    with pytest.raises(ConfigError, match="must match"):
        ToolRegistry([bad])


async def test_unknown_tool_suggests_the_closest_name(ctx):
    registry = default_registry()
    with pytest.raises(UnknownTool) as failure:
        await registry.invoke("read_fiel", "{}", ctx)
    assert "Did you mean 'read_file'?" in str(failure.value)
    assert failure.value.suggestion == "read_file"


def test_openai_tools_format():
    registry = default_registry()
    offered = registry.openai_tools(["read_file", "terminate"])
    assert [t["function"]["name"] for t in offered] == ["read_file", "terminate"]
    for entry in registry.openai_tools():
        assert entry["type"] == "function"
        assert TOOL_NAME.match(entry["function"]["name"])
        assert entry["function"]["parameters"]["type"] == "object"
        assert entry["function"]["description"]
    with pytest.raises(UnknownTool):
        registry.openai_tools(["nope"])


def test_default_registry_is_new_each_time():
    first, second = default_registry(), default_registry()
    assert first is not second
    first.register(greet)
    assert "greet" not in second


async def test_secrets_are_redacted_from_results_and_failures(make_ctx):
    @tool
    def leak(ctx: ToolContext, fail: bool = False) -> ToolResult:
        """Leak the key."""
        if fail:
            raise ToolFailure("upstream said: bad key sk-live-999")
        return ToolResult(content="key=sk-live-999", data={"nested": ["sk-live-999"]})

    ctx = make_ctx(secrets=["sk-live-999"])
    registry = ToolRegistry([leak])
    result = await registry.invoke("leak", {}, ctx)
    assert "sk-live-999" not in result.content and "sk-live-999" not in json.dumps(result.data)
    with pytest.raises(ToolFailure) as failure:
        await registry.invoke("leak", {"fail": True}, ctx)
    assert "sk-live-999" not in str(failure.value) and "[REDACTED]" in str(failure.value)


def test_tool_context_resolves_the_workspace_once(workspace, tmp_path):
    link = tmp_path / "ws-link"
    link.symlink_to(workspace)
    assert ToolContext(workspace=link).workspace == workspace.resolve()
    with pytest.raises(ValueError, match="absolute"):
        ToolContext(workspace="relative/ws")  # type: ignore[arg-type]


def test_importing_the_registry_stays_light():
    code = (
        "import sys, runner.tools.registry, runner.tools\n"
        "runner.tools.registry.default_registry()\n"
        "heavy = [m for m in ('pandas', 'matplotlib', 'openai', 'mcp', 'httpx2', 'httpx', 'pyarrow') if m in sys.modules]\n"
        "print(heavy)"
    )
    output = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert output.strip() == "[]"
