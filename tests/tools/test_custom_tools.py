"""Custom tools declared in YAML: python, shell, http and mcp."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from runner.errors import ConfigError, ToolFailure
from runner.tools.custom import McpToolset, build_custom_tool
from runner.tools.registry import ToolRegistry

from .conftest import CANARY, LoopbackServer, Route

pytestmark = pytest.mark.timeout(120)
MCP_SERVER = pytest.mark.slow(reason="starts an MCP server process (runner starts it, over stdio)")
SERVER_SCRIPT = str(Path(__file__).with_name("mcp_echo_server.py"))


def doc(kind: str, **fields: object) -> dict[str, object]:
    return {"apiVersion": "runner/v1", "kind": "Tool", "name": fields.pop("name", f"my_{kind}"), "type": kind, **fields}


# --- python ----------------------------------------------------------------------------


async def test_python_tool_from_a_plain_function(ctx, workspace):
    tool = build_custom_tool(
        doc("python", python={"function": "tests.tools.sample_tools:word_count"}), "tools.d/wc.yaml:1"
    )
    assert tool.kind == "python" and tool.source == "tools.d/wc.yaml:1" and tool.name == "my_python"
    assert tool.parameters["required"] == ["path"]
    assert tool.parameters["properties"]["min_length"]["description"] == "Only count words at least this long."
    (workspace / "t.txt").write_text("a bb ccc")
    result = await ToolRegistry([tool]).invoke("my_python", {"path": "t.txt", "min_length": 2}, ctx)
    assert result.data == {"words": 2}


async def test_python_tool_from_a_decorated_function(ctx):
    tool = build_custom_tool(
        doc("python", name="shout", description="Shout.", python={"function": "tests.tools.sample_tools:shout"}),
        "t.yaml:2",
    )
    assert tool.description == "Shout." and tool.kind == "python"
    assert (await ToolRegistry([tool]).invoke("shout", {"text": "hi"}, ctx)).content == "HI"


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("tests.tools.no_such_module:f", "cannot import module"),
        ("tests.tools.sample_tools:missing", "has no 'missing'"),
        ("tests.tools.sample_tools:NOT_CALLABLE", "is not a function"),
        ("no_colon", "must look like"),
    ],
)
def test_python_tool_config_errors(target, message):
    with pytest.raises(ConfigError, match=message):
        build_custom_tool(doc("python", python={"function": target}), "tools.d/x.yaml:4")


# --- shell -----------------------------------------------------------------------------

WC = doc(
    "shell",
    name="word_count",
    description="Count words in a file.",
    parameters={
        "path": {"type": "string", "description": "File to count."},
        "mode": {"type": "string", "enum": ["-w", "-l"], "default": "-w"},
    },
    shell={"command": ["wc", "{mode}", "{path}"]},
)


async def test_shell_tool_substitutes_each_argument_as_one_element(ctx, workspace):
    tool = build_custom_tool(WC, "tools.d/wc.yaml:1")
    assert tool.needs_sandbox and tool.kind == "shell"
    assert tool.parameters["properties"]["path"] == {"type": "string", "description": "File to count."}
    (workspace / "my file; rm -rf x.txt").write_text("one two three")
    result = await ToolRegistry([tool]).invoke("word_count", {"path": "my file; rm -rf x.txt"}, ctx)
    assert result.data["stdout"].split()[0] == "3"
    lines = await ToolRegistry([tool]).invoke("word_count", {"path": "my file; rm -rf x.txt", "mode": "-l"}, ctx)
    assert lines.data["stdout"].split()[0] == "0"


async def test_shell_tool_refuses_option_injection_and_bad_types(ctx):
    registry = ToolRegistry([build_custom_tool(WC, "tools.d/wc.yaml:1")])
    with pytest.raises(ToolFailure, match="may not start with '-'"):
        await registry.invoke("word_count", {"path": "--files0-from=/etc/passwd"}, ctx)
    with pytest.raises(ToolFailure, match="Input should be '-w' or '-l'"):
        await registry.invoke("word_count", {"path": "x", "mode": "-c"}, ctx)


def test_shell_tool_with_an_undeclared_placeholder_is_a_config_error():
    with pytest.raises(ConfigError, match=r"uses \{file\} but no parameter 'file'"):
        build_custom_tool(doc("shell", shell={"command": ["cat", "{file}"]}), "tools.d/cat.yaml:1")


# --- http ------------------------------------------------------------------------------


def echo_request(handler) -> bytes:
    return json.dumps({"path": handler.path, "auth": handler.headers.get("Authorization")}).encode()


async def test_http_tool_sends_arguments_and_redacts_the_api_key(make_ctx, http_server: LoopbackServer, monkeypatch):
    monkeypatch.setenv("EXAMPLE_API_KEY", "sk-http-secret-42")
    http_server.routes["/items/a b"] = Route(headers={"Content-Type": "application/json"}, body=echo_request)
    http_server.routes["/items/a%20b"] = http_server.routes["/items/a b"]
    spec = doc(
        "http",
        name="get_item",
        parameters={"item": {"type": "string"}, "verbose": {"type": "boolean", "default": False}},
        http={
            "url": http_server.url("/items/{item}"),
            "method": "GET",
            "api_key_env": "EXAMPLE_API_KEY",
            "headers": {"X-Client": "runner"},
        },
    )
    tool = build_custom_tool(spec, "tools.d/item.yaml:1")
    result = await ToolRegistry([tool]).invoke(
        "get_item", {"item": "a b", "verbose": True}, make_ctx(network=http_server.policy)
    )
    assert "sk-http-secret-42" not in result.content and "sk-http-secret-42" not in json.dumps(result.data)
    assert result.data["auth"] == "Bearer [REDACTED]"
    request = http_server.requests[0]
    assert request["path"] == "/items/a%20b?verbose=true"
    assert {k.lower(): v for k, v in request["headers"].items()}["x-client"] == "runner"


async def test_http_tool_posts_json_and_reports_http_errors(make_ctx, http_server: LoopbackServer):
    http_server.routes["/create"] = Route(
        status=422, headers={"Content-Type": "application/json"}, body=b'{"error": "bad"}'
    )
    spec = doc(
        "http",
        name="create",
        parameters={"title": {"type": "string"}},
        http={"url": http_server.url("/create"), "method": "POST"},
    )
    registry = ToolRegistry([build_custom_tool(spec, "tools.d/create.yaml:1")])
    with pytest.raises(ToolFailure, match="HTTP 422"):
        await registry.invoke("create", {"title": "x"}, make_ctx(network=http_server.policy))
    assert json.loads(http_server.requests[0]["body"]) == {"title": "x"}


async def test_http_tool_obeys_the_network_policy(ctx, http_server: LoopbackServer):
    spec = doc("http", name="local", http={"url": http_server.url("/")})
    with pytest.raises(ToolFailure, match="not a public address"):
        await ToolRegistry([build_custom_tool(spec, "t.yaml:1")]).invoke("local", {}, ctx)
    assert http_server.requests == []


async def test_http_tool_without_its_key_is_a_config_error(ctx, monkeypatch):
    monkeypatch.delenv("MISSING_KEY", raising=False)
    spec = doc("http", name="keyed", http={"url": "https://example.com/", "api_key_env": "MISSING_KEY"})
    with pytest.raises(ConfigError, match="MISSING_KEY"):
        await ToolRegistry([build_custom_tool(spec, "t.yaml:1")]).invoke("keyed", {}, ctx)


# --- mcp -------------------------------------------------------------------------------


def mcp_doc(**mcp: object) -> dict[str, object]:
    return doc("mcp", name="echo", mcp={"command": [sys.executable, SERVER_SCRIPT], **mcp})


def process_alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return False
    return state != "Z"


@MCP_SERVER
async def test_mcp_toolset_registers_and_calls_server_tools(ctx, canary):
    async with McpToolset(mcp_doc(env={"ECHO_TOKEN": "declared"}), "tools.d/echo.yaml:1") as tools:
        registry = ToolRegistry(tools)
        assert registry.names() == ["echo__add", "echo__environment", "echo__fail", "echo__process_id", "echo__sleep"]
        add = registry.get("echo__add")
        assert add.kind == "mcp" and add.parameters["required"] == ["a", "b"]
        assert (await registry.invoke("echo__add", '{"a": 2, "b": 3}', ctx)).content == "5"
        with pytest.raises(ToolFailure, match="/b"):
            await registry.invoke("echo__add", {"a": 2, "b": "three"}, ctx)
        with pytest.raises(ToolFailure, match="boom"):
            await registry.invoke("echo__fail", {"message": "boom"}, ctx)
        names = set((await registry.invoke("echo__environment", {}, ctx)).content.split(","))
        pid = int((await registry.invoke("echo__process_id", {}, ctx)).content)
    assert "RUNNER_TEST_CANARY_KEY" not in names
    assert {"PATH", "ECHO_TOKEN"} <= names
    assert not names & {"HOME", "USER", "LOGNAME", "SHELL", "TERM"}
    for _ in range(100):
        if not process_alive(pid):
            break
        time.sleep(0.05)
    assert not process_alive(pid)
    with pytest.raises(ToolFailure, match="not running"):
        await registry.invoke("echo__add", {"a": 1, "b": 1}, ctx)


@MCP_SERVER
async def test_mcp_call_timeout_is_a_tool_failure(ctx):
    async with McpToolset(mcp_doc(tools=["sleep"]), "tools.d/echo.yaml:1", call_timeout_seconds=0.5) as tools:
        with pytest.raises(ToolFailure, match="timed out"):
            await ToolRegistry(tools).invoke("echo__sleep", {"seconds": 5}, ctx)


@MCP_SERVER
async def test_exceptions_inside_the_block_propagate_unwrapped():
    with pytest.raises(KeyError, match="from the loop"):
        async with McpToolset(mcp_doc(tools=["add"]), "tools.d/echo.yaml:1"):
            raise KeyError("from the loop")


@MCP_SERVER
async def test_mcp_allow_list_keeps_only_named_tools(ctx):
    async with McpToolset(mcp_doc(tools=["add"]), "tools.d/echo.yaml:1") as tools:
        assert [t.name for t in tools] == ["echo__add"]


@MCP_SERVER
async def test_mcp_allow_list_with_unknown_tool_is_a_config_error():
    with pytest.raises(ConfigError, match="has no tool subtract"):
        async with McpToolset(mcp_doc(tools=["subtract"]), "tools.d/echo.yaml:1"):
            pass


async def test_mcp_server_that_cannot_start_is_a_config_error(tmp_path):
    spec = doc("mcp", name="ghost", mcp={"command": ["/nonexistent/mcp-server"]})
    with (tmp_path / "stderr.log").open("w") as errlog, pytest.raises(ConfigError) as error:
        async with McpToolset(spec, "tools.d/ghost.yaml:1", call_timeout_seconds=5, errlog=errlog):
            pass
    assert "tools.d/ghost.yaml:1: cannot start MCP server 'ghost'" in str(error.value)


def test_mcp_documents_are_not_built_directly():
    with pytest.raises(ConfigError, match="McpToolset"):
        build_custom_tool(mcp_doc(), "tools.d/echo.yaml:1")


def test_canary_constant_is_shared():
    assert CANARY.startswith("sk-")
