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


SEARCH_PROVIDERS = ("searxng", "brave", "tavily")
"""The search APIs ``web_search`` can ask (here, so its settings need not load the providers' code)."""

WEB_SEARCH_SETTINGS: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["provider"],
    "properties": {
        "provider": {"description": "Which search API answers: " + ", ".join(SEARCH_PROVIDERS) + ".", "enum": list(SEARCH_PROVIDERS)},
        "url": {
            "description": "The provider's search endpoint (required for searxng, e.g. https://searx.example.org/search).",
            "type": "string",
            "pattern": "^https?://",
            "maxLength": 2048,
        },
        "api_key_env": {
            "description": "NAME of the environment variable that holds the API key (never the key itself).",
            "type": "string",
            "pattern": "^[A-Za-z_][A-Za-z0-9_]*$",
        },
        "max_results": {"description": "Results per search at most (default 5).", "type": "integer", "minimum": 1, "maximum": 20},
        "timeout_seconds": TIMEOUT_SECONDS,
    },
    "allOf": [
        {"if": {"properties": {"provider": {"const": "searxng"}}}, "then": {"required": ["url"]}},
        {"if": {"properties": {"provider": {"enum": ["brave", "tavily"]}}}, "then": {"required": ["api_key_env"]}},
    ],
}


BROWSE_SETTINGS = settings_schema(
    timeout_seconds={"description": "Seconds one call may take, navigation and actions included (default 30).",
                     "type": "number", "exclusiveMinimum": 0, "maximum": 600},
    max_run_seconds={"description": "Seconds all browse calls of one run may take together (default 300).",
                     "type": "number", "exclusiveMinimum": 0, "maximum": 7200},
    max_page_bytes={"description": "Bytes the page may load in one call, every request together (default 5000000).",
                    "type": "integer", "minimum": 10000, "maximum": 200000000},
    settle_seconds={"description": "After the DOM is ready, how long to let scripts and late requests finish (default 2).",
                    "type": "number", "minimum": 0, "maximum": 60},
)  # fmt: skip


SQL_DEFAULT_MAX_ROWS = 200
SQL_QUERY_SETTINGS = settings_schema(
    sources={
        "description": "Sources this agent may query (default: every source of the task).",
        "type": "array",
        "minItems": 1,
        "uniqueItems": True,
        "items": {"type": "string", "pattern": "^[a-z][a-z0-9_]{0,63}$"},
    },
    max_rows={
        "description": f"Rows one query returns to the model (default {SQL_DEFAULT_MAX_ROWS}; never above the source's max_rows).",
        "type": "integer",
        "minimum": 1,
        "maximum": 100000,
    },
    timeout_seconds={
        "description": "Statement timeout (never above the source's timeout_seconds).",
        "type": "number",
        "exclusiveMinimum": 0,
        "maximum": 3600,
    },
    allow={
        "description": "Tables this agent may read, on top of each source's own allow list: 'schema.table', 'schema.*' or 'table'.",
        "type": "array",
        "minItems": 1,
        "items": {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_$]*(\\.([A-Za-z_][A-Za-z0-9_$]*|\\*))?$"},
    },
)
