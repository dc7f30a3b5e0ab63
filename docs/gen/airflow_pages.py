"""The Airflow reference, generated from the operators and functions themselves.

For every public operator, hook and DAG-building function of ``runner.airflow``: the import
line, each argument with its type and default (from the signature), and its description (from
the ``Args:`` section of the docstring, Google style). An argument without a description is
listed all the same; ``tests/test_docs.py`` requires one for every operator argument.
"""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Callable, Iterator
from typing import Any

from option_table import section as batch_options_section
from schema_pages import _cell

# What a DAG author imports, in the order the guide introduces them.
PUBLIC: tuple[tuple[str, str], ...] = (
    ("runner.airflow.operator", "RunnerTaskOperator"),
    ("runner.airflow.batch_operator", "RunnerBatchOperator"),
    ("runner.airflow.fanout", "batch_fanout"),
    ("runner.airflow.fanout", "RunnerSplitOperator"),
    ("runner.airflow.fanout", "RunnerShardOperator"),
    ("runner.airflow.fanout", "RunnerMergeOperator"),
    ("runner.airflow.hook", "RunnerModelHook"),
)

# Arguments every operator takes from BaseOperator, documented by Airflow.
_INHERITED = {"kwargs", "self"}


def public_objects() -> Iterator[tuple[str, str, Any]]:
    """``(module, name, object)`` of every public Airflow entry point that exists."""
    for module_name, name in PUBLIC:
        value = getattr(importlib.import_module(module_name), name, None)
        if value is not None:
            yield module_name, name, value


def page() -> str:
    lines = [
        "# Airflow reference",
        "",
        "Operators, the fan-out builder and the model connection's hook, with every argument, then the",
        "[batch options](#batch-options) the operators take in `options`. Each operator also takes",
        "BaseOperator's arguments (`task_id`, `retries`, `pool`, `execution_timeout`, ...).",
        "",
    ]
    for module_name, name, value in public_objects():
        lines += [f"## `{name}`", "", "```python", f"from {module_name} import {name}", "```", ""]
        doc = inspect.getdoc(value) or ""
        summary = doc.split("\n\n", 1)[0]
        lines += [" ".join(summary.split()), ""]
        described = argument_docs(*documented(value))
        rows = list(arguments(value))
        if rows:
            lines += ["| argument | type | default | description |", "|---|---|---|---|"]
            for arg, annotation, default in rows:
                description = described.get(arg.lstrip("*"), "")
                lines.append(f"| `{arg}` | {_cell(annotation)} | {_cell(default)} | {_cell(description)} |")
            lines.append("")
        fields = getattr(value, "template_fields", None)
        if fields:
            lines += ["Templated: " + ", ".join(f"`{field}`" for field in fields) + ".", ""]
    lines += batch_options_section()
    return "\n".join(lines).rstrip() + "\n"


def constructors(value: Any) -> list[Callable[..., Any]]:
    """The functions whose arguments ``value`` takes: a function itself; for a class, the
    ``__init__`` of it and of each runner base class it passes ``**kwargs`` on to."""
    if not inspect.isclass(value):
        return [value]
    return [cls.__init__ for cls in value.__mro__ if cls.__module__.startswith("runner.") and "__init__" in vars(cls)]


def documented(value: Any) -> list[Any]:
    """Where ``value``'s arguments are described: its docstring, its bases' and their ``__init__``'s."""
    classes = [cls for cls in value.__mro__ if cls.__module__.startswith("runner.")] if inspect.isclass(value) else []
    return [value, *classes, *constructors(value)]


def arguments(value: Any) -> Iterator[tuple[str, str, str]]:
    """``(name, annotation, default)`` of each argument ``value`` takes (but ``self`` and the
    ``**kwargs`` passed on to Airflow), its own first, then its runner base classes'; other keywords
    as ``**name`` (``batch_fanout``'s batch options)."""
    seen: set[str] = set()
    parameters = (p for function in constructors(value) for p in inspect.signature(function).parameters.values())
    for parameter in parameters:
        if parameter.name in _INHERITED or parameter.name in seen:
            continue
        seen.add(parameter.name)
        annotation = "" if parameter.annotation is parameter.empty else _annotation(parameter.annotation)
        if parameter.kind is parameter.VAR_KEYWORD:
            yield f"**{parameter.name}", annotation, ""
            continue
        default = "required" if parameter.default is parameter.empty else f"`{parameter.default!r}`"
        yield parameter.name, annotation, default


def argument_docs(*sources: Any) -> dict[str, str]:
    """Argument descriptions from the ``Args:`` sections of the docstrings of ``sources``."""
    found: dict[str, str] = {}
    for source in sources:
        for name, text in _args_section(inspect.getdoc(source) or ""):
            found.setdefault(name, text)
    return found


def _args_section(doc: str) -> Iterator[tuple[str, str]]:
    match = re.search(r"^Args:\n((?:[ \t]+.*\n?|\n)+)", doc, re.MULTILINE)
    if not match:
        return
    name, parts = "", []
    for line in match.group(1).splitlines():
        head = re.match(r"^\s{2,4}(\*{0,2}\w+)(?: \([^)]*\))?:\s*(.*)$", line)
        if head:
            if name:
                yield name, " ".join(parts)
            name, parts = head.group(1).lstrip("*"), [head.group(2)]
        elif name:
            parts.append(line.strip())
    if name:
        yield name, " ".join(parts)


def _annotation(annotation: Any) -> str:
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", repr(annotation))
    return f"`{text}`"
