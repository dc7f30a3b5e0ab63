"""The built-in tools' reference, generated from the tools themselves.

Each built-in tool declares the JSON Schema of its arguments (what the model is offered) and of
its settings (what an agent may write under ``tools: [{name: T, settings: {...}}]``); the page
renders both for every entry of :data:`runner.tools.builtins.BUILTINS`, so a tool added there
appears here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from schema_pages import _cell, _description, _fields, _nested_object, _type


def page() -> str:
    from runner.tools.builtins import BUILTINS

    lines = [
        "# Built-in tools",
        "",
        "Every built-in tool an agent may list under `tools:`, with the arguments the model passes",
        "and the settings an agent may give it (`tools: [{name: shell, settings: {timeout_seconds: 30}}]`).",
        "A pipeline's tool step passes the same arguments under `arguments:`.",
        "",
    ]
    for entry in sorted(BUILTINS, key=lambda item: item.name):
        tool = entry.build()
        lines += [f"## `{tool.name}`", "", " ".join(tool.description.split()), ""]
        if tool.needs_sandbox:
            lines += ["Runs in the sandbox (see [Safety](../safety.md)).", ""]
        lines += ["**Arguments**", "", *_table(_inline(tool.parameters), "argument")]
        if tool.settings_schema.get("properties"):
            lines += ["**Settings**", "", *_table(tool.settings_schema, "setting")]
    return "\n".join(lines).rstrip() + "\n"


def _table(schema: Mapping[str, Any], heading: str, prefix: str = "") -> list[str]:
    """A field table; a field holding objects gets its own rows, named ``field.sub``."""
    fields = list(_fields(schema))
    if not fields and not prefix:
        return ["None.", ""]
    rows = [f"| {heading} | type | description |", "|---|---|---|"] if not prefix else []
    nested_rows: list[str] = []
    for item in fields:
        name = f"{prefix}{item.name}"
        required = " (required)" if item.required else ""
        rows.append(f"| `{name}`{required} | {_type('tools', item.schema)} | {_cell(_description(item.schema))} |")
        nested = _nested_object(item.schema)
        if nested is not None:
            nested_rows += _table(nested, heading, prefix=f"{name}.")
    rows += nested_rows
    return rows + ([""] if not prefix else [])


def _inline(schema: Mapping[str, Any]) -> dict[str, Any]:
    """``schema`` with its local ``#/$defs/X`` references replaced by the definitions (pydantic
    writes nested models that way), so one table shows them."""
    definitions = schema.get("$defs") or {}

    def resolve(node: Any, depth: int = 0) -> Any:
        if isinstance(node, Mapping):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/") and depth < 8:
                merged = {**definitions.get(ref.removeprefix("#/$defs/"), {}), **{k: v for k, v in node.items() if k != "$ref"}}
                return resolve(merged, depth + 1)
            return {key: resolve(value, depth) for key, value in node.items() if key != "$defs"}
        if isinstance(node, list):
            return [resolve(value, depth) for value in node]
        return node

    resolved: dict[str, Any] = resolve(schema)
    return resolved
