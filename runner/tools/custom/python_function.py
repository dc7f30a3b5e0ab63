"""Custom ``python`` tools: a function named by import path, e.g. ``pkg.mod:func``.

The schema is derived from the signature and docstring exactly as for built-ins. The
function runs in the runner's process (it is project code, not model code); it should
raise :class:`~runner.errors.ToolFailure` for failures the model should see.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Mapping
from typing import Any

from runner.errors import ConfigError
from runner.tools.base import Tool, tool_from_function


def build_python_tool(data: Mapping[str, Any], source: str) -> Tool:
    """Import ``data['python']['function']`` and make it the tool ``data['name']``."""
    target = data["python"]["function"]
    target_object = _import(target, source)
    name, description = data["name"], data.get("description")
    if isinstance(target_object, Tool):
        return dataclasses.replace(
            target_object, name=name, kind="python", source=source,
            description=description or target_object.description,
        )  # fmt: skip
    if not callable(target_object):
        raise ConfigError(f"{source}: '{target}' is not a function")
    try:
        return tool_from_function(target_object, name=name, kind="python", source=source, description=description)
    except (TypeError, NameError) as error:
        raise ConfigError(f"{source}: cannot derive a schema from '{target}': {error}") from None


def _import(target: str, source: str) -> Any:
    module_name, _, attribute_path = target.partition(":")
    if not module_name or not attribute_path:
        raise ConfigError(f"{source}: python.function must look like 'package.module:function'")
    try:
        value: Any = importlib.import_module(module_name)
    except ImportError as error:
        raise ConfigError(f"{source}: cannot import module '{module_name}': {error}") from None
    for attribute in attribute_path.split("."):
        try:
            value = getattr(value, attribute)
        except AttributeError:
            raise ConfigError(f"{source}: module '{module_name}' has no '{attribute_path}'") from None
    return value
