"""Finding, at validate time, the templates that would fail at run time.

Two passes over a template whose variables are already known to exist (see
:func:`runner.config.template_engine.references`):

1. static: ``include``/``import``/``extends``, attributes the sandbox refuses (``_...``,
   ``format``, also through ``|attr``), unknown filters and tests, each with its line;
2. dynamic: a render against the context a run would give (``inputs`` from the declared
   types, ``steps``, ``previous``, ``today``, ``run_id``) with sample values. An error that
   goes away with a second, different set of sample values depends on the values a run is
   given (``{{ 100 // inputs.n }}``): it is left to the run, which reports it with its place.

Step outputs and the previous run's values have no declared shape, so they are
:class:`SampleUnknown`: any attribute, item or iteration works on them. An error that may
come from such a value's shape is not reported (it depends on the run); the sandbox's
refusals, loaders, recursion and sizes always are.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Iterator
from typing import Any

from jinja2 import ChainableUndefined, TemplateNotFound, TemplateRuntimeError, UndefinedError, nodes
from jinja2.exceptions import SecurityError

from runner.config.specs import InputSpec
from runner.config.template_engine import compile_template, describe, environment, parse, render_bounded
from runner.config.template_types import TemplateError
from runner.errors import did_you_mean

SAMPLE_DATE = dt.date(2024, 1, 31)
SAMPLE_RUN_ID = "sample-20240131T000000Z-000000"
SAMPLES: tuple[dict[str, Any], ...] = (
    {"string": "sample text", "integer": 3, "number": 2.5, "boolean": True, "date": SAMPLE_DATE.isoformat()},
    {"string": "2023-12-01, another; sample", "integer": -7, "number": 0.125, "boolean": False, "date": "2023-12-01"},
)
"""Two sample values per input type, as different from each other as the types allow."""
_ALWAYS_REPORTED = (SecurityError, TemplateNotFound, TemplateRuntimeError, RecursionError, MemoryError, TemplateError)
_LOADING = (nodes.Include, nodes.Import, nodes.FromImport, nodes.Extends)


class _ShapeUnknown(Exception):
    """A sample value was used in a way only a real value can answer (``x + 1``, ``x < 3``)."""


class SampleUnknown(ChainableUndefined):
    """A value whose shape is known only at run time (a step's output, the previous run).

    Any attribute or item is itself, it iterates as empty and renders as ``""``; arithmetic
    and comparisons end the sample render quietly. ``touched`` records that it was used,
    so errors after that are not blamed on the template.
    """

    __slots__ = ("touched",)

    def __init__(self) -> None:
        super().__init__(hint="a value known only at run time")
        self.touched = False

    def _fail_with_undefined_error(self, *args: Any, **kwargs: Any) -> Any:
        self.touched = True
        raise _ShapeUnknown()

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _fail_with_undefined_error
    __truediv__ = __rtruediv__ = __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = _fail_with_undefined_error
    __pos__ = __neg__ = __call__ = __lt__ = __le__ = __gt__ = __ge__ = _fail_with_undefined_error
    __int__ = __float__ = __complex__ = __pow__ = __rpow__ = _fail_with_undefined_error

    def __getattr__(self, name: str) -> Any:
        if name[:1] == "_":  # so the sandbox looks it up as an item (data keys like "_id")
            raise AttributeError(name)
        self.touched = True
        return self

    def __getitem__(self, key: Any) -> Any:
        self.touched = True
        return self

    def __iter__(self) -> Iterator[Any]:
        self.touched = True
        return iter(())

    def __str__(self) -> str:
        self.touched = True
        return ""

    def __bool__(self) -> bool:
        return True  # so that {% if steps.x.data %} branches are checked too

    def __len__(self) -> int:
        self.touched = True
        return 0

    def __eq__(self, other: object) -> bool:
        self.touched = True
        return False

    def __ne__(self, other: object) -> bool:
        self.touched = True
        return True

    def __hash__(self) -> int:
        return id(self)


def sample_inputs(inputs: Iterable[InputSpec], variant: int = 0) -> dict[str, Any]:
    """A value for each declared input: its default, else an enum value, else one of its type
    (``variant`` picks which of :data:`SAMPLES` and which end of the enum)."""
    values: dict[str, Any] = {}
    for spec in inputs:
        if spec.has_default and spec.default is not None and spec.default not in ("today", "yesterday"):
            values[spec.name] = spec.default
        elif spec.enum:
            values[spec.name] = spec.enum[-variant]
        else:
            values[spec.name] = SAMPLES[variant][spec.type]
    return values


def sample_context(inputs: dict[str, Any], step_ids: Iterable[str], unknown: SampleUnknown, previous: bool) -> dict[str, Any]:
    """What a run gives templates (see ``RunContext.template_context``), with sample values."""
    steps = {sid: {"output": unknown, "data": unknown, "status": "completed", "artifacts": []} for sid in step_ids}
    last = {"run_id": SAMPLE_RUN_ID, "finished_at": SAMPLE_DATE.isoformat(), "date": SAMPLE_DATE.isoformat(),
            "inputs": unknown, "outputs": unknown, "tables": unknown}  # fmt: skip
    return {
        "inputs": inputs,
        "steps": steps,
        "previous": last if previous else None,
        "today": SAMPLE_DATE.isoformat(),
        "run_id": SAMPLE_RUN_ID,
    }


def static_problems(template: str) -> list[str]:
    """What the template does that no run could do, each with its line."""
    tree = parse(template)
    problems = [
        f"template uses {{% {_tag(node)} %}} on line {node.lineno}; templates cannot load files: write the text inline"
        for node in tree.find_all(_LOADING)
    ]
    called = {id(call.node) for call in tree.find_all(nodes.Call)}
    for node in tree.find_all((nodes.Getattr, nodes.Getitem, nodes.Filter, nodes.Test)):
        problem = _node_problem(node, called)
        inner = getattr(node, "node", None)
        if problem and not (isinstance(inner, nodes.Node) and _node_problem(inner, called)):  # one per chain: the first
            problems.append(problem)
    if not problems:
        try:
            compile_template(template)  # what the parser alone does not see
        except TemplateError as exc:
            problems.append(str(exc))
    return problems


def render_problem(template: str, contexts: list[dict[str, Any]], unknown: SampleUnknown) -> str | None:
    """Why rendering ``template`` fails whatever sample values it is given, or ``None``.

    Refusals (sandbox, loaders, recursion, sizes) count on the first context; an ordinary
    error only if every context fails, so an error that depends on the values is not blamed
    on the template here."""
    failure = _render_failure(template, contexts[0], unknown)
    if failure is None:
        return None
    message, always = failure
    if not always and any(_render_failure(template, other, unknown) is None for other in contexts[1:]):
        return None
    return message


def _render_failure(template: str, context: dict[str, Any], unknown: SampleUnknown) -> tuple[str, bool] | None:
    """``(message, always)`` when rendering fails; ``always`` for refusals no value could avoid."""
    unknown.touched = False
    try:
        render_bounded(compile_template(template), context)
    except _ShapeUnknown:
        return None
    except UndefinedError as exc:  # a value without that attribute or item: depends on the value
        return describe(exc) + _samples_note(context["inputs"]), False
    except _ALWAYS_REPORTED as exc:
        return (str(exc) if isinstance(exc, TemplateError) else describe(exc)), True
    except Exception as exc:  # the template's own code failed on sample values
        if unknown.touched:
            return None
        return describe(exc) + _samples_note(context["inputs"]), False
    return None


def _tag(node: nodes.Node) -> str:
    tags: dict[type[nodes.Node], str] = {nodes.Include: "include", nodes.Import: "import", nodes.FromImport: "from ... import"}
    return tags.get(type(node), "extends")


def _node_problem(node: nodes.Node, called: set[int]) -> str | None:
    """A refused attribute (a dunder, or ``str.format`` called), an unknown filter or test.

    Other names are left to the render: ``_id`` or ``format`` may be keys of a step's data."""
    name: Any = None
    if isinstance(node, nodes.Getattr):
        name = node.attr
    elif isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Const):
        name = node.arg.value
    elif isinstance(node, nodes.Filter) and node.name == "attr" and node.args and isinstance(node.args[0], nodes.Const):
        name = node.args[0].value
    elif isinstance(node, nodes.Test) and node.name not in environment().tests:
        return f"template uses an unknown test '{node.name}' on line {node.lineno}{did_you_mean(node.name, environment().tests)}"
    if isinstance(node, nodes.Filter) and node.name not in environment().filters:
        return f"template uses an unknown filter '{node.name}' on line {node.lineno}{did_you_mean(node.name, environment().filters)}"
    if isinstance(name, str) and (name.startswith("__") or (name in ("format", "format_map") and id(node) in called)):
        return (
            f"template reads the attribute '{name}' on line {node.lineno}, which the template sandbox refuses; "
            "use plain values and filters (e.g. |format) instead"
        )
    return None


def _samples_note(inputs: dict[str, Any]) -> str:
    shown = ", ".join(f"{k}={v!r}" for k, v in inputs.items())
    return f" (with sample inputs {shown})" if shown else ""
