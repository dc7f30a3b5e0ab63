"""The configuration reference: one Markdown page per kind, generated from the JSON Schemas.

The schemas in ``runner/config/schemas/`` are the only definition of the language, so the
reference is rendered from them at build time and cannot drift: every field of every kind,
its type, whether it is required, its default and limits, and its description. References
to another schema's ``$defs`` (``common.schema.json#/$defs/caps``) link to that definition's
section on the page of that schema.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

# The kinds a user writes, in the order a reader meets them, and the page of each schema.
PAGES: dict[str, str] = {
    "agent": "Agent (agents.d/*.yaml)",
    "task": "Task (tasks.d/*.yaml)",
    "tool": "Tool (tools.d/*.yaml)",
    "source": "Source (SQL sources)",
    "knowledge": "Knowledge base",
    "eval": "Eval (evals.d/*.yaml)",
    "budget": "Budget (budgets.d/*.yaml)",
    "profiles": "Model profiles (what each model accepts and how it bills)",
    "telemetry": "Telemetry (traces)",
    "prices": "Prices (prices.yaml)",
    "plan": "Plan (what a planner emits)",
    "common": "Shared definitions",
}

_LIMITS = (
    ("minimum", "≥ {}"), ("exclusiveMinimum", "> {}"), ("maximum", "≤ {}"), ("exclusiveMaximum", "< {}"),
    ("minLength", "at least {} characters"), ("maxLength", "at most {} characters"),
    ("minItems", "at least {} items"), ("maxItems", "at most {} items"), ("pattern", "matches `{}`"),
)  # fmt: skip


# The schemas of the page being rendered, by name (set by :func:`page`).
_SCHEMAS: dict[str, Mapping[str, Any]] = {}


@dataclass(frozen=True)
class Field:
    """One row of a field table: a property of an object schema."""

    name: str
    schema: Mapping[str, Any]
    required: bool


def page(name: str, schema: Mapping[str, Any], schemas: Mapping[str, Mapping[str, Any]] | None = None) -> str:
    """The Markdown page of the schema ``name`` (``agent``, ``task``, ...); ``schemas`` (every
    schema by name) lends a referenced definition's description to a field that has none."""
    _SCHEMAS.clear()
    _SCHEMAS.update(schemas or {name: schema})
    lines = [f"# {PAGES.get(name, name)}", ""]
    if schema.get("description"):
        lines += [str(schema["description"]), ""]
    lines += [f"Schema: `runner/config/schemas/{name}.schema.json` (`runner schema --out DIR` writes it).", ""]
    if "properties" in schema:
        lines += _object_section(name, "", schema, level=2)
    for def_name, definition in (schema.get("$defs") or {}).items():
        lines += [f"## `{def_name}` {{#{_anchor(name, '$defs', def_name)}}}", ""]
        lines += _described(definition)
        lines += _object_section(name, def_name, definition, level=3) if _is_object(definition) else [_type_line(name, definition), ""]
    return "\n".join(lines).rstrip() + "\n"


def _object_section(page_name: str, path: str, schema: Mapping[str, Any], *, level: int) -> list[str]:
    """A table of an object's fields, then a section per field that is an object itself."""
    fields = list(_fields(schema))
    if not fields:
        return [_type_line(page_name, schema), ""]
    lines = ["| field | type | description |", "|---|---|---|"]
    for item in fields:
        sub = f"{path}.{item.name}" if path else item.name
        kind = _type(page_name, item.schema)
        if _nested_object(item.schema) is not None and "$ref" not in item.schema:
            kind = f"[{kind}](#{_anchor(page_name, sub)})"
        lines.append(
            f"| `{item.name}`{' (required)' if item.required else ''} | {kind} | "
            f"{_cell(_description(item.schema) or _referenced_description(page_name, item.schema))} |"
        )
    lines.append("")
    if schema.get("additionalProperties") is False:
        lines += ["Any other key is an error.", ""]
    for item in fields:
        nested = _nested_object(item.schema)
        if nested is not None:
            sub = f"{path}.{item.name}" if path else item.name
            lines += [f"{'#' * level} `{sub}` {{#{_anchor(page_name, sub)}}}", ""]
            lines += _object_section(page_name, sub, nested, level=min(level + 1, 6))
    return lines


def _fields(schema: Mapping[str, Any]) -> Iterator[Field]:
    required = set(schema.get("required") or ())
    for name, sub in (schema.get("properties") or {}).items():
        yield Field(name, sub if isinstance(sub, Mapping) else {}, name in required)


def _is_object(schema: Mapping[str, Any]) -> bool:
    return "properties" in schema


def _nested_object(schema: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The object schema a field holds (itself, its list's items, or one of its ``oneOf`` branches
    that has properties): documented in a section of its own."""
    if _is_object(schema):
        return schema
    items = schema.get("items")
    if isinstance(items, Mapping) and _is_object(items):
        return items
    for branch in schema.get("oneOf") or schema.get("anyOf") or ():
        if isinstance(branch, Mapping) and _is_object(branch):
            return branch
    return None


def _type(page_name: str, schema: Mapping[str, Any]) -> str:
    """A field's type in a few words: a link for a reference, the values of an enum, limits."""
    if "$ref" in schema:
        return _ref_link(page_name, str(schema["$ref"]))
    if "const" in schema:
        return f"`{json.dumps(schema['const'])}`"
    if "enum" in schema:
        return " \\| ".join(f"`{json.dumps(value)}`" for value in schema["enum"])
    branches = schema.get("oneOf") or schema.get("anyOf")
    if branches:
        return " or ".join(_type(page_name, branch) for branch in branches if isinstance(branch, Mapping))
    kind = schema.get("type")
    text = " or ".join(kind) if isinstance(kind, list) else str(kind or "any")
    if kind == "array" and isinstance(schema.get("items"), Mapping):
        text = f"list of {_type(page_name, schema['items'])}"
    elif kind == "object" and isinstance(schema.get("additionalProperties"), Mapping):
        text = f"map of {_type(page_name, schema['additionalProperties'])}"
    limits = [template.format(schema[key]) for key, template in _LIMITS if key in schema and key != "pattern"]
    return text + (f" ({', '.join(limits)})" if limits else "")


def _type_line(page_name: str, schema: Mapping[str, Any]) -> str:
    text = f"Type: {_type(page_name, schema)}."
    if "pattern" in schema:
        text += f" Pattern: `{schema['pattern']}`."
    return text


def _ref_link(page_name: str, ref: str) -> str:
    """``common.schema.json#/$defs/caps`` -> a link to that section; ``#/$defs/x`` to this page's."""
    target, _, pointer = ref.partition("#")
    schema_name = target.removesuffix(".schema.json") if target else page_name
    parts = [part for part in pointer.split("/") if part]
    label = parts[-1] if parts else schema_name
    href = "" if schema_name == page_name else f"{schema_name}.md"
    section = parts[:2] if parts[:1] == ["$defs"] else []  # a field inside a definition: its section
    return f"[{label}]({href}#{_anchor(schema_name, *section)})"


def _anchor(*parts: str) -> str:
    return "-".join(part.replace("$", "").replace(".", "-").replace("_", "-") for part in parts if part).lower()


def _description(schema: Mapping[str, Any]) -> str:
    text = str(schema.get("description") or "")
    if "default" in schema:
        text += f" Default: `{json.dumps(schema['default'])}`."
    if "pattern" in schema and "$ref" not in schema:
        text += f" Pattern: `{schema['pattern']}`."
    return text.strip()


def _referenced_description(page_name: str, schema: Mapping[str, Any]) -> str:
    """The description of the definition a ``$ref`` names (a field that only refers has none)."""
    ref = schema.get("$ref")
    if not isinstance(ref, str):
        return ""
    target, _, pointer = ref.partition("#")
    node: Any = _SCHEMAS.get(target.removesuffix(".schema.json") if target else page_name, {})
    for part in (part for part in pointer.split("/") if part):
        node = node.get(part, {}) if isinstance(node, Mapping) else {}
    return _description(node) if isinstance(node, Mapping) else ""


def _described(schema: Mapping[str, Any]) -> list[str]:
    text = _description(schema)
    return [text, ""] if text else []


def _cell(text: str) -> str:
    """Text fit for one table cell: no line breaks, pipes escaped outside code spans (the
    tables extension leaves a pipe inside backticks alone, and would show the backslash)."""
    spans = " ".join(text.split()).split("`")
    return "`".join(span if index % 2 else span.replace("|", "\\|") for index, span in enumerate(spans))
