"""What a tool is: its description for the model, how it runs, and what it returns.

Every tool, built-in or declared in ``tools.d/``, ends up as one :class:`Tool` value in a
:class:`~runner.tools.registry.ToolRegistry`. Python functions become tools through the
:func:`tool` decorator, which derives the JSON Schema offered to the model from the
signature and the docstring.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, overload

from runner.core.sources import Source
from runner.redact import redact_secrets
from runner.tools.arguments import ArgumentSchema, PydanticArguments
from runner.tools.net import NetworkPolicy
from runner.tools.sandbox_policy import SandboxPolicy
from runner.tools.settings import NO_SETTINGS
from runner.tools.sql.source import SqlSources

if TYPE_CHECKING:  # a run without knowledge or memory does not load them
    from runner.knowledge.base import KnowledgeBase
    from runner.knowledge.memory import Notebook

ToolKind = Literal["builtin", "python", "shell", "http", "mcp"]


@dataclass(frozen=True)
class ToolResult:
    """What a tool call produced.

    ``content`` is the text the model sees; ``artifacts`` are workspace-relative paths the
    call produced (charts, files); ``data`` is an optional JSON-able value for
    deterministic pipeline steps (a data tool returns both a rendering and the rows);
    ``sources`` are what the call found that an answer may cite (knowledge chunks, web pages).
    """

    content: str
    artifacts: list[str] = field(default_factory=list)
    data: Any = None
    sources: tuple[Source, ...] = ()


@dataclass(frozen=True)
class ToolContext:
    """Everything a tool may use besides its arguments, all from trusted configuration.

    ``workspace`` is resolved once here and never derived from model output.
    ``settings`` maps a tool name to that tool's settings from the agent YAML.
    ``secrets`` are exact values redacted from every tool output and failure message.
    ``knowledge`` are the knowledge bases ``search_knowledge`` may search (by name),
    ``memory`` the notebook of ``remember``/``recall``, ``browser`` the page ``browse`` drives.
    ``sql`` holds the SQL sources ``load_table`` and ``sql_query`` may read.
    """

    workspace: Path
    sandbox: SandboxPolicy = field(default_factory=SandboxPolicy)
    network: NetworkPolicy = field(default_factory=NetworkPolicy)
    settings: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    secrets: Sequence[str] = ()
    deadline: float | None = None  # time.monotonic() by which sandboxed work must end (a wall-clock cap)
    knowledge: Mapping[str, KnowledgeBase] = field(default_factory=dict)
    memory: Notebook | None = None
    browser: Any = None  # a runner.tools.browser.BrowserTab, when the agent may browse
    sql: SqlSources = field(default_factory=SqlSources)

    def __post_init__(self) -> None:
        root = Path(self.workspace)
        if not root.is_absolute():
            raise ValueError(f"workspace must be an absolute path, got {str(root)!r}")
        root = root.resolve(strict=True)
        if not root.is_dir():
            raise ValueError(f"workspace {str(root)!r} is not a directory")
        object.__setattr__(self, "workspace", root)

    @property
    def disk_quota_bytes(self) -> int:
        """The most the workspace may hold (``sandbox.disk_mb``), also for what tools write on the host."""
        return self.sandbox.disk_mb * 1024 * 1024

    def settings_for(self, tool_name: str) -> Mapping[str, Any]:
        """The YAML settings of one tool (empty when none were given)."""
        return self.settings.get(tool_name, {})


ToolRunner = Callable[[ToolContext, dict[str, Any]], Awaitable[ToolResult]]
"""Runs a tool with validated arguments."""


@dataclass(frozen=True)
class Tool:
    """A tool as offered to the model and invoked by the registry.

    ``source`` says where it was defined (``runner.tools.builtins.files:read_file`` or
    ``tools.d/x.yaml:3``) so duplicate names and failures can point at it.
    ``settings_schema`` is the JSON Schema of the settings an agent may give the tool
    (see :mod:`runner.tools.settings`); ``runner validate`` checks them against it.
    """

    name: str
    description: str
    arguments: ArgumentSchema
    run: ToolRunner = field(repr=False)
    kind: ToolKind = "builtin"
    source: str = ""
    needs_sandbox: bool = False
    terminates: bool = False
    settings_schema: Mapping[str, Any] = field(default_factory=lambda: NO_SETTINGS)

    @property
    def parameters(self) -> dict[str, Any]:
        """The JSON Schema of the arguments, as offered to the model."""
        return self.arguments.json_schema


def to_result(value: object) -> ToolResult:
    """Turn a tool function's return value into a :class:`ToolResult`.

    Strings become the content; other JSON-able values are rendered as JSON and also
    kept as ``data``.
    """
    if isinstance(value, ToolResult):
        return value
    if isinstance(value, str):
        return ToolResult(content=value)
    if value is None:
        return ToolResult(content="")
    return ToolResult(content=json.dumps(value, ensure_ascii=False, default=str), data=value)


def redact_result(result: ToolResult, secrets: Sequence[str]) -> ToolResult:
    """Return ``result`` with every secret replaced by ``[REDACTED]``; an artifact whose path
    holds one (sandboxed code can name a file after the key) is not reported at all, since
    the run record, the event stream and the report's copy would all carry its name."""
    kept = [path for path in result.artifacts if redact_secrets(path, secrets) == path]
    content = redact_secrets(result.content, secrets)
    if len(kept) < len(result.artifacts):
        note = f"[note: {len(result.artifacts) - len(kept)} written file(s) not reported: their names hold a secret]"
        content = f"{content}\n{note}" if content else note
    return ToolResult(content=content, artifacts=kept, data=redact_secrets(result.data, secrets), sources=result.sources)


ToolFunction = Callable[..., Any]


@overload
def tool(function: ToolFunction, /) -> Tool: ...
@overload
def tool(
    *,
    name: str | None = None,
    kind: ToolKind = "builtin",
    needs_sandbox: bool = False,
    terminates: bool = False,
    settings_schema: Mapping[str, Any] | None = None,
    blocking: bool = True,
) -> Callable[[ToolFunction], Tool]: ...
def tool(
    function: ToolFunction | None = None,
    /,
    *,
    name: str | None = None,
    kind: ToolKind = "builtin",
    needs_sandbox: bool = False,
    terminates: bool = False,
    settings_schema: Mapping[str, Any] | None = None,
    blocking: bool = True,
) -> Tool | Callable[[ToolFunction], Tool]:
    """Make a :class:`Tool` from a function; usable bare (``@tool``) or with options.

    The schema comes from the signature (pydantic validates and coerces the arguments) and
    parameter descriptions from the docstring's ``Args:`` section. A first parameter named
    ``ctx`` receives the :class:`ToolContext` and is not offered to the model. Sync
    functions run in a worker thread, unless ``blocking=False`` says the function does only
    quick, bounded work (no I/O), which then runs on the event loop without a thread hop.
    ``settings_schema``: the settings the tool reads (default: none).
    """

    def decorate(fn: ToolFunction) -> Tool:
        return tool_from_function(
            fn, name=name, kind=kind, needs_sandbox=needs_sandbox, terminates=terminates,
            settings_schema=settings_schema, blocking=blocking,
        )  # fmt: skip

    return decorate(function) if function is not None else decorate


def tool_from_function(
    fn: ToolFunction,
    *,
    name: str | None = None,
    kind: ToolKind = "builtin",
    source: str | None = None,
    description: str | None = None,
    needs_sandbox: bool = False,
    terminates: bool = False,
    settings_schema: Mapping[str, Any] | None = None,
    blocking: bool = True,
) -> Tool:
    """Build a :class:`Tool` from a Python function (see :func:`tool`)."""
    arguments = PydanticArguments.from_function(fn, skip=("ctx",))
    takes_ctx = "ctx" in inspect.signature(fn).parameters
    is_async = inspect.iscoroutinefunction(fn)

    async def run(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
        call_args = {"ctx": ctx, **args} if takes_ctx else args
        if is_async:
            value = await fn(**call_args)
        elif blocking:
            value = await asyncio.to_thread(fn, **call_args)
        else:
            value = fn(**call_args)
        return to_result(value)

    return Tool(
        name=name or fn.__name__,
        description=description or arguments.description,
        arguments=arguments,
        run=run,
        kind=kind,
        source=source or f"{fn.__module__}:{fn.__qualname__}",
        needs_sandbox=needs_sandbox,
        terminates=terminates,
        settings_schema=NO_SETTINGS if settings_schema is None else settings_schema,
    )
