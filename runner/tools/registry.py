"""The tool registry: one place where tools are named, offered to the model and invoked.

Built-ins and custom tools are registered the same way. A registry is a plain object
(no module-level state): :func:`default_registry` builds a new one with every built-in.
A tool can be registered before it is built (:meth:`ToolRegistry.register_lazy`): its
name and settings are known at once, and it is built the first time it is looked up, so
listing or validating names builds nothing and a run builds only the tools it uses.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from runner import untrusted_json
from runner.errors import ArgumentsRefused, ConfigError, InvalidToolCall, RunnerError, ToolFailure
from runner.redact import redact_secrets
from runner.tools.arguments import ArgumentsInvalid
from runner.tools.base import Tool, ToolContext, ToolResult, redact_result
from runner.tools.written import checked_artifacts, take_snapshot, with_written_files

TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_MAX_ARGUMENTS_CHARS = 1_000_000
_SURROGATE = re.compile("[\ud800-\udfff]")


class UnknownTool(InvalidToolCall):
    """A tool name that is not registered; ``suggestion`` is the closest known name."""

    def __init__(self, name: str, known: list[str]):
        import difflib  # only for an unknown name

        self.name = name
        close = difflib.get_close_matches(name, known, n=1)
        self.suggestion = close[0] if close else None
        hint = f" Did you mean '{self.suggestion}'?" if self.suggestion else ""
        super().__init__(f"unknown tool '{name}'.{hint} Available tools: {', '.join(known)}")


@dataclass(frozen=True)
class PendingTool:
    """A tool registered by name, built on first use by ``build``."""

    name: str
    source: str
    settings_schema: Mapping[str, Any]
    build: Callable[[], Tool]


class ToolRegistry:
    """Named tools; offers them in OpenAI function format and invokes them by name."""

    def __init__(self, tools: Iterable[Tool] = ()):
        self._tools: dict[str, Tool | PendingTool] = {}
        self.extend(tools)

    def register(self, tool: Tool | PendingTool) -> None:
        """Add ``tool``; a second tool with the same name is an error naming both sources."""
        if not TOOL_NAME.match(tool.name):
            raise ConfigError(f"{tool.source}: tool name '{tool.name}' must match {TOOL_NAME.pattern}")
        existing = self._tools.get(tool.name)
        if existing is not None:
            raise ConfigError(f"tool '{tool.name}' is defined twice: {existing.source} and {tool.source}")
        self._tools[tool.name] = tool

    def register_lazy(self, name: str, source: str, settings_schema: Mapping[str, Any], build: Callable[[], Tool]) -> None:
        """Add a tool that ``build`` makes the first time it is looked up; ``settings_schema``
        (what the built tool will declare) answers :meth:`settings_schema` without building."""
        self.register(PendingTool(name, source, settings_schema, build))

    def extend(self, tools: Iterable[Tool]) -> None:
        """Register several tools."""
        for tool in tools:
            self.register(tool)

    def get(self, name: str) -> Tool:
        """The tool called ``name`` (built now if it was registered lazily); :class:`UnknownTool`
        (with a suggestion) otherwise."""
        try:
            found = self._tools[name]
        except KeyError:
            raise UnknownTool(name, self.names()) from None
        if isinstance(found, PendingTool):
            found = self._tools[name] = _built(found)
        return found

    def settings_schema(self, name: str) -> Mapping[str, Any]:
        """The JSON Schema of the settings tool ``name`` takes, without building it."""
        found = self._tools.get(name)
        if found is None:
            raise UnknownTool(name, self.names())
        return found.settings_schema

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def names(self) -> list[str]:
        """Registered tool names, sorted."""
        return sorted(self._tools)

    def openai_tools(self, names: Iterable[str] | None = None) -> list[dict[str, Any]]:
        """The named tools (default: all) in OpenAI Chat Completions ``tools`` format."""
        selected = self.names() if names is None else list(names)
        return [_openai_tool(self.get(name)) for name in selected]

    async def invoke(self, name: str, arguments_json: str | dict[str, Any], ctx: ToolContext) -> ToolResult:
        """Validate the arguments and run the tool; secrets are redacted from the arguments and the result,
        and its artifacts are the files it named plus, for sandboxed tools, the files that
        are new or changed in the workspace (see :mod:`runner.tools.written`).

        Raises :class:`~runner.errors.ToolFailure` (an observation for the model) for an
        unknown tool, malformed JSON, arguments that do not match the schema (the message
        names each problem and repeats the schema), or a failure the tool reports.
        """
        tool = self.get(name)
        # A key in the arguments could only come from an endpoint echoing it: no tool needs one
        # (tools that send keys read them from their settings), and none may write it to disk,
        # to memory or into a URL.
        arguments = redact_secrets(_parse_arguments(tool, arguments_json), ctx.secrets)
        try:
            validated = tool.arguments.validate(arguments)
        except ArgumentsInvalid as invalid:
            short = f"invalid arguments for tool '{tool.name}': {'; '.join(invalid.problems)}"
            raise ArgumentsRefused(f"{short}. {_expected(tool)}", short) from None
        # Sandboxed code names no files: what it wrote is found by listing the workspace.
        before = await asyncio.to_thread(take_snapshot, ctx.workspace) if tool.needs_sandbox else None
        try:
            result = await tool.run(ctx, validated)
        except ToolFailure as failure:
            kind = InvalidToolCall if isinstance(failure, InvalidToolCall) else ToolFailure
            raise kind(redact_secrets(str(failure), ctx.secrets)) from None
        except OSError as error:  # the tool's I/O failed on what the model asked for (a name too long, a full disk)
            raise ToolFailure(f"tool '{tool.name}' failed: {_os_failure(error)}") from None
        except RunnerError:
            raise  # caps, configuration, an unavailable sandbox: these end the run as they should
        except Exception as error:  # a model's arguments or a workspace it wrote broke the tool
            raise ToolFailure(redact_secrets(f"tool '{tool.name}' failed: {_unexpected(error)}", ctx.secrets)) from None
        if before is not None:
            result = with_written_files(result, before, await asyncio.to_thread(take_snapshot, ctx.workspace))
        return redact_result(_without_surrogates(checked_artifacts(result)), ctx.secrets)


def _without_surrogates(result: ToolResult) -> ToolResult:
    """``result`` with each lone surrogate as a visible ``\\udcff`` escape: a file name that is
    not UTF-8 (listed by ``os.scandir``) or a custom tool's text cannot be encoded, and the
    run's hashing, reports and the next request all encode what a tool returned."""
    if not _has_lone_surrogate([result.content, result.data]):
        return result
    return replace(result, content=_escaped(result.content), data=_escaped(result.data))


def _escaped(value: Any) -> Any:
    if isinstance(value, str):
        return _SURROGATE.sub(lambda found: f"\\u{ord(found.group()):04x}", value)
    if isinstance(value, dict):
        return {_escaped(k): _escaped(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_escaped(v) for v in value]
    return value


def _unexpected(error: Exception) -> str:
    """An error no tool meant to raise, as one short line (the run goes on; the model sees it)."""
    first = (str(error).strip().splitlines() or [""])[0][:300]
    return f"{type(error).__name__}: {first}" if first else type(error).__name__


def _os_failure(error: OSError) -> str:
    """What went wrong, without the file name (the model's argument, maybe megabytes long)."""
    return os.strerror(error.errno) if error.errno else type(error).__name__


def default_registry() -> ToolRegistry:
    """A new registry holding every built-in tool (each built when first looked up)."""
    registry = ToolRegistry()
    for pending in _builtins():
        registry.register(pending)
    return registry


@functools.cache
def _builtins() -> tuple[PendingTool, ...]:
    """One frozen entry per built-in, shared by every registry (a batch makes one registry per
    row; each row building its own twenty entries was memory held by every row in flight)."""
    from runner.tools.builtins import BUILTINS

    return tuple(PendingTool(entry.name, entry.source, entry.settings_schema, entry.build) for entry in BUILTINS)


def _built(pending: PendingTool) -> Tool:
    tool = pending.build()
    if tool.name != pending.name:
        raise ConfigError(f"{pending.source}: registered as tool '{pending.name}' but builds tool '{tool.name}'")
    return tool


def _openai_tool(tool: Tool) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description,
            "parameters": tool.parameters,
        },
    }


def _parse_arguments(tool: Tool, arguments_json: str | dict[str, Any]) -> dict[str, Any]:
    value = arguments_json if isinstance(arguments_json, dict) else _decode_arguments(tool, arguments_json)
    if _has_lone_surrogate(value):  # JSON may spell one ("\ud800"); no file name or text can hold it
        raise InvalidToolCall(
            f"arguments for tool '{tool.name}' contain a lone UTF-16 surrogate (such as \\ud800), which is not "
            "a character; send valid Unicode text"
        )
    return value


def _decode_arguments(tool: Tool, arguments_json: str) -> dict[str, Any]:
    text = arguments_json.strip()
    if not text:
        return {}
    if len(text) > _MAX_ARGUMENTS_CHARS:
        raise InvalidToolCall(
            f"arguments for tool '{tool.name}' are {len(text)} characters long (limit {_MAX_ARGUMENTS_CHARS})"
        )
    try:
        value = untrusted_json.loads(text, parse_constant=_reject_constant)
    except ValueError as error:
        raise InvalidToolCall(
            f"arguments for tool '{tool.name}' are not valid JSON ({error}). Send one JSON object. {_expected(tool)}"
        ) from None
    if not isinstance(value, dict):
        raise InvalidToolCall(
            f"arguments for tool '{tool.name}' must be a JSON object, got {type(value).__name__}. {_expected(tool)}"
        )
    return value


def _has_lone_surrogate(value: object) -> bool:
    """Whether a string anywhere in ``value`` (keys too) holds a lone surrogate."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                return True
        elif isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list | tuple):
            pending.extend(item)
    return False


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not allowed in arguments")


def _expected(tool: Tool) -> str:
    return f"Expected arguments (JSON Schema): {json.dumps(tool.parameters, ensure_ascii=False)}"
