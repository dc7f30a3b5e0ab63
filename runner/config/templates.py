"""Goal and argument templates: Jinja2 in its sandbox, with undefined variables as errors.

Variables available to templates:

* ``inputs.NAME``: the task's typed inputs;
* ``steps.ID.output`` (and ``steps.ID.data``): outputs of steps the template's step depends on;
* ``previous``: the previous completed run of the task with other inputs (``previous.outputs``,
  ``previous.tables``, ``previous.inputs``, ``previous.run_id``, ``previous.date``), when the task
  enables ``memory.previous_run``; otherwise ``None``;
* ``today``: the run's date (ISO), ``run_id``.

Filters beyond Jinja's own: ``add_days`` (``{{ inputs.date | add_days(-7) }}``).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from jinja2 import StrictUndefined, TemplateSyntaxError, UndefinedError, nodes
from jinja2.sandbox import SandboxedEnvironment

ROOT_NAMES = ("inputs", "steps", "previous", "today", "run_id")


class TemplateError(Exception):
    """A template could not be parsed or rendered; the message says why."""


@dataclass(frozen=True)
class Reference:
    """One variable a template reads: ``root`` and the attribute path under it."""

    root: str
    path: tuple[str, ...]


@cache
def _environment() -> SandboxedEnvironment:
    env = SandboxedEnvironment(undefined=StrictUndefined, autoescape=False, keep_trailing_newline=True)
    env.filters["tojson_compact"] = _tojson
    env.filters["add_days"] = _add_days
    return env


def _add_days(value: str, days: int) -> str:
    """``{{ inputs.date | add_days(-7) }}``: an ISO date moved by ``days``."""
    import datetime as dt

    return (dt.date.fromisoformat(str(value)) + dt.timedelta(days=int(days))).isoformat()


def _tojson(value: Any) -> str:
    import json

    return json.dumps(value, default=str, ensure_ascii=False)


def render(template: str, context: dict[str, Any]) -> str:
    """Render ``template``; undefined variables raise :class:`TemplateError`."""
    try:
        return _compiled(template).render(context)
    except UndefinedError as exc:
        raise TemplateError(f"template uses an undefined variable: {exc.message}") from None
    except TemplateSyntaxError as exc:
        raise TemplateError(f"template syntax error on line {exc.lineno}: {exc.message}") from None


@cache
def _compiled(template: str) -> Any:
    return _environment().from_string(template)


def references(template: str) -> list[Reference]:
    """Variables a template reads (``inputs.date`` -> Reference('inputs', ('date',)))."""
    try:
        tree = _environment().parse(template)
    except TemplateSyntaxError as exc:
        raise TemplateError(f"template syntax error on line {exc.lineno}: {exc.message}") from None
    found: list[Reference] = []
    assigned = {n.name for n in tree.find_all(nodes.Name) if n.ctx in ("store", "param")}
    for node in tree.find_all((nodes.Getattr, nodes.Getitem, nodes.Name)):
        ref = _reference(node)
        if ref and ref.root not in assigned:
            found.append(ref)
    # keep only the longest path per chain (Getattr nests)
    longest: dict[tuple[str, ...], Reference] = {}
    for ref in found:
        key = (ref.root, *ref.path)
        if not any(k[: len(key)] == key and len(k) > len(key) for k in longest):
            longest[key] = ref
    return [r for k, r in longest.items() if not any(o[: len(k)] == k and len(o) > len(k) for o in longest)]


def _reference(node: nodes.Node) -> Reference | None:
    path: list[str] = []
    while isinstance(node, nodes.Getattr | nodes.Getitem):
        if isinstance(node, nodes.Getattr):
            path.append(node.attr)
        elif isinstance(node.arg, nodes.Const):
            path.append(str(node.arg.value))
        else:
            path.clear()
        node = node.node
    if isinstance(node, nodes.Name) and node.ctx == "load":
        return Reference(node.name, tuple(reversed(path)))
    return None
