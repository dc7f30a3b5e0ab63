"""The built-in tools, one module each, registered like any other tool.

:data:`BUILTINS` names every built-in, the module that defines it and the settings it
takes, so ``runner validate`` and ``runner list`` know the tools without importing a
tool module (a module builds its tool's argument schema when imported). A registry
builds a tool the first time it is looked up (:meth:`Builtin.build`).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from runner.tools.settings import (
    BROWSE_SETTINGS,
    COMMAND_SETTINGS,
    NO_SETTINGS,
    PYTHON_SETTINGS,
    SQL_QUERY_SETTINGS,
    WEB_SEARCH_SETTINGS,
)

if TYPE_CHECKING:
    from runner.tools.base import Tool


@dataclass(frozen=True)
class Builtin:
    """One built-in tool: its name, where it is defined, and the settings it takes
    (the same schema the tool itself declares; a test keeps the two equal)."""

    name: str
    module: str
    attribute: str
    settings_schema: Mapping[str, Any] = field(default_factory=lambda: NO_SETTINGS)

    @property
    def source(self) -> str:
        return f"runner.tools.builtins.{self.module}:{self.attribute}"

    def build(self) -> Tool:
        """The tool, from its module (imported on first use)."""
        built: Tool = getattr(importlib.import_module(f"runner.tools.builtins.{self.module}"), self.attribute)
        return built


BUILTINS: tuple[Builtin, ...] = (
    Builtin("python", "python", "run_python", PYTHON_SETTINGS),
    Builtin("shell", "shell", "run_shell", COMMAND_SETTINGS),
    Builtin("read_file", "files", "read_file"),
    Builtin("write_file", "files", "write_file"),
    Builtin("list_files", "files", "list_files"),
    Builtin("fetch_url", "fetch", "fetch_url"),
    Builtin("web_search", "web_search", "web_search", WEB_SEARCH_SETTINGS),
    Builtin("browse", "browse", "browse", BROWSE_SETTINGS),
    Builtin("search_knowledge", "knowledge", "search_knowledge"),
    Builtin("remember", "memory", "remember"),
    Builtin("recall", "memory", "recall"),
    Builtin("calculator", "calculator", "calculator"),
    Builtin("current_time", "clock", "current_time"),
    Builtin("terminate", "terminate", "terminate"),
    Builtin("load_table", "tables", "load_table"),
    Builtin("describe_table", "tables", "describe_table"),
    Builtin("query_table", "table_query", "query_table"),
    Builtin("chart", "chart", "chart"),
    Builtin("sql_query", "sql_query", "sql_query", SQL_QUERY_SETTINGS),
)


def builtin_names() -> list[str]:
    """The names of the built-in tools, sorted; imports no tool module."""
    return sorted(entry.name for entry in BUILTINS)


def builtin_tools() -> list[Tool]:
    """Every built-in tool, built (heavy libraries are imported only when a tool runs)."""
    return [entry.build() for entry in BUILTINS]
