"""Per-tool settings: what an agent may write in ``tools: [{name: T, settings: {...}}]``.

Every tool declares the JSON Schema of its settings (:attr:`runner.tools.base.Tool.settings`),
so ``runner validate`` checks them by type, with a located error, before a run; a tool that
reads no settings declares :data:`NO_SETTINGS`, and any key given to it is an error. A tool
reads its settings through ``ToolContext.settings_for`` and can trust their types.

Custom tools (``tools.d/``) get the settings of their type (a ``shell`` command has
``timeout_seconds``) plus the ones their document declares under ``settings:``, each typed
like a parameter.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

TIMEOUT_SECONDS: dict[str, Any] = {
    "description": "Wall-clock seconds one call may take (replaces the sandbox's wall_seconds).",
    "type": "number",
    "exclusiveMinimum": 0,
    "maximum": 3600,
}
INTERPRETER: dict[str, Any] = {
    "description": "Absolute path of the Python interpreter (inside the sandbox: under /usr).",
    "type": "string",
    "pattern": "^/[^\\x00]*$",
    "maxLength": 4096,
}


def settings_schema(**properties: dict[str, Any]) -> dict[str, Any]:
    """A settings schema: an object with exactly these optional ``properties``."""
    return {"type": "object", "additionalProperties": False, "properties": properties}


NO_SETTINGS = settings_schema()
COMMAND_SETTINGS = settings_schema(timeout_seconds=TIMEOUT_SECONDS)
PYTHON_SETTINGS = settings_schema(timeout_seconds=TIMEOUT_SECONDS, interpreter=INTERPRETER)

_BY_CUSTOM_TYPE: dict[str, dict[str, Any]] = {
    "python": NO_SETTINGS,
    "shell": COMMAND_SETTINGS,
    "http": NO_SETTINGS,
    "mcp": NO_SETTINGS,
}


def custom_settings_schema(data: Mapping[str, Any]) -> dict[str, Any]:
    """The settings schema of a ``tools.d`` document: its type's settings plus its declared ones."""
    declared = {name: _typed(spec) for name, spec in (data.get("settings") or {}).items()}
    own = _BY_CUSTOM_TYPE.get(str(data.get("type")), NO_SETTINGS)["properties"]
    return settings_schema(**(declared | own))  # the runner reads its own settings: their types win


def _typed(spec: Mapping[str, Any]) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": spec["type"]}
    for key in ("enum", "description"):
        if key in spec:
            schema[key] = spec[key]
    return schema
