"""The Jinja side of templates: the sandboxed environment, compiling, rendering, parsing.

Imported only when a template has template syntax (see :func:`runner.config.templates.is_plain`)
or when templates are checked; the rules are in :mod:`runner.config.templates`.
"""

from __future__ import annotations

import datetime as dt
import json
from functools import cache
from types import TracebackType
from typing import Any

from jinja2 import (
    BaseLoader,
    Environment,
    StrictUndefined,
    TemplateNotFound,
    TemplateSyntaxError,
    UndefinedError,
    nodes,
)
from jinja2.exceptions import SecurityError
from jinja2.sandbox import SandboxedEnvironment

from runner.config.template_budget import (
    BUDGET_FILTERS,
    BudgetedCodeGenerator,
    BudgetingTransformer,
    TemplateTooCostly,
    bounded_lipsum,
    bounded_value,
    budgeted,
    check_binop,
    check_call,
    check_result,
    guarded_filters,
    spend,
)
from runner.config.template_types import MAX_EXPONENT, MAX_RENDERED_CHARS, Origin, Reference, TemplateError
from runner.errors import Problem


class _Sandbox(SandboxedEnvironment):
    """Jinja's sandbox, with ``str.format`` refused, ``*`` / ``**`` / ``+`` / ``%`` kept to sane
    sizes, and every lookup, call, operation, loop iteration and filter spending from the
    render's budget (:mod:`runner.config.template_budget`)."""

    intercepted_binops = frozenset({"*", "**", "+", "%"})
    code_generator_class = BudgetedCodeGenerator

    def _generate(self, source: nodes.Template, name: str | None, filename: str | None, defer_init: bool = False) -> str:
        return super()._generate(BudgetingTransformer().visit(source), name, filename, defer_init)  # type: ignore[no-any-return]

    def getattr(self, obj: Any, attribute: str) -> Any:
        spend()
        if _is_str_format(obj, attribute):
            return self.unsafe_undefined(obj, attribute)
        return super().getattr(obj, attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        spend()
        if _is_str_format(obj, argument):
            return self.unsafe_undefined(obj, argument)
        return super().getitem(obj, argument)

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        spend()
        if operator == "**" and _is_int(right) and right > MAX_EXPONENT and _is_number(left) and abs(left) > 1:
            raise SecurityError(f"the exponent {right} is too large (at most {MAX_EXPONENT})")
        if operator == "*" and _repeats_beyond_limit(left, right):
            raise SecurityError(f"repeating a value this many times makes more than {MAX_RENDERED_CHARS} items")
        check_binop(operator, left, right)
        return bounded_value(super().call_binop(context, operator, left, right))

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        check_call(__obj, args, kwargs)
        return check_result(__obj, super().call(__context, __obj, *args, **kwargs))

    def bounded_value(self, value: Any) -> Any:
        """What ``~`` made, refused when too large (called from compiled templates)."""
        return bounded_value(value)


def _is_str_format(obj: Any, attribute: Any) -> bool:
    """``str.format``/``format_map``: format strings reach attributes and can pad to any
    width; the ``|format`` filter covers the honest uses."""
    return isinstance(obj, str) and attribute in ("format", "format_map")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _repeats_beyond_limit(left: Any, right: Any) -> bool:
    for sequence, count in ((left, right), (right, left)):
        if isinstance(sequence, str | list | tuple) and _is_int(count):
            return len(sequence) * count > MAX_RENDERED_CHARS
    return False


class _NoTemplateFiles(BaseLoader):
    """Templates are single strings in YAML: ``include``/``import``/``extends`` load nothing."""

    def get_source(self, environment: Environment, template: str) -> Any:
        raise TemplateNotFound(template)


@cache
def environment() -> SandboxedEnvironment:
    """The one template environment (sandboxed, strict about undefined variables)."""
    env = _Sandbox(loader=_NoTemplateFiles(), undefined=StrictUndefined, autoescape=False, keep_trailing_newline=True)
    env.filters.update(guarded_filters(env.filters))
    env.filters.update(BUDGET_FILTERS)
    env.filters["tojson_compact"] = _tojson
    env.filters["add_days"] = _add_days
    env.globals["lipsum"] = bounded_lipsum(env.globals["lipsum"])  # type: ignore[arg-type]
    return env


def _add_days(value: str, days: int) -> str:
    """``{{ inputs.date | add_days(-7) }}``: an ISO date moved by ``days``."""
    return (dt.date.fromisoformat(str(value)) + dt.timedelta(days=int(days))).isoformat()


def _tojson(value: Any) -> str:
    return json.dumps(value, default=str, ensure_ascii=False)


def render_template(template: str, context: dict[str, Any]) -> str:
    """Render ``template`` with Jinja (see :func:`runner.config.templates.render`)."""
    try:
        return render_bounded(compile_template(template), context)
    except TemplateError as exc:
        raise TemplateError(_locate(template, str(exc))) from None
    except Exception as exc:  # the template's own code failed: whatever it raised is its error
        raise TemplateError(_locate(template, describe(exc))) from None


def compile_template(template: str) -> Any:
    """The compiled template; :class:`TemplateError` for syntax errors and unknown filters."""
    try:
        return _compiled(str(template))
    except TemplateSyntaxError as exc:  # also unknown filters (TemplateAssertionError)
        raise TemplateError(f"template syntax error on line {exc.lineno}: {exc.message}") from None


def render_bounded(compiled: Any, context: dict[str, Any]) -> str:
    """Render a compiled template, stopping once the output passes ``MAX_RENDERED_CHARS``."""
    parts: list[str] = []
    size = 0
    with budgeted():
        for chunk in compiled.generate(context):
            size += len(chunk)
            if size > MAX_RENDERED_CHARS:
                raise TemplateError(f"the template renders to more than {MAX_RENDERED_CHARS} characters")
            parts.append(chunk)
    return "".join(parts)


@cache
def _compiled(template: str) -> Any:
    return environment().from_string(template)


def describe(exc: BaseException) -> str:
    """A person's message for an exception raised while rendering, with the template line."""
    line = template_line(exc.__traceback__)
    where = f" on line {line}" if line else ""
    if isinstance(exc, TemplateTooCostly):
        return f"template refused{where}: {exc}"
    if isinstance(exc, SecurityError):
        return (
            f"template refused{where}: {str(exc).rstrip('.')}; templates run in a sandbox "
            "(no '_' attributes, no str.format, bounded sizes): use plain values and filters"
        )
    if isinstance(exc, TemplateNotFound):
        return f"template{where} uses include, import or extends ({exc.name!r}); templates cannot load files: write the text inline"
    if isinstance(exc, UndefinedError):
        return f"template uses an undefined variable{where}: {exc.message}"
    if isinstance(exc, RecursionError):
        return f"template{where} recurses too deeply (a macro calling itself?)"
    if isinstance(exc, MemoryError):
        return f"template{where} ran out of memory"
    message = getattr(exc, "message", None) or str(exc) or type(exc).__name__
    return f"template error{where}: {message}"


def template_line(tb: TracebackType | None) -> int | None:
    """The template line of the innermost template frame (Jinja rewrites tracebacks so
    that template frames carry template lines)."""
    line = None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == "<template>":
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def _locate(template: str, message: str) -> str:
    origin = getattr(template, "origin", None)
    if not isinstance(origin, Origin):
        return message
    return Problem(origin.file, origin.line, origin.column, origin.pointer, message).render()


def parse(template: str) -> nodes.Template:
    """The template's syntax tree; :class:`TemplateError` for syntax errors."""
    try:
        return environment().parse(str(template))
    except TemplateSyntaxError as exc:
        raise TemplateError(f"template syntax error on line {exc.lineno}: {exc.message}") from None


def references(template: str) -> list[Reference]:
    """Variables a template reads (``inputs.date`` -> Reference('inputs', ('date',)))."""
    tree = parse(template)
    found: list[Reference] = []
    assigned = {n.name for n in tree.find_all(nodes.Name) if n.ctx in ("store", "param")}
    assigned |= {m.name for m in tree.find_all(nodes.Macro)}
    assigned |= {i.target for i in tree.find_all(nodes.Import)}
    assigned |= {n if isinstance(n, str) else n[1] for f in tree.find_all(nodes.FromImport) for n in f.names}
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
