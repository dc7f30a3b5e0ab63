"""The work one template render may do: a step budget, a deadline, and bounded values.

Jinja's sandbox stops attribute tricks, not work: ``{% for a in range(99999) %}{% for b in
range(99999) %}{% endfor %}{% endfor %}`` renders nothing for hours, a macro that calls itself
twice doubles its work per level, and ``x|replace("a", x)`` or ``"%999999999s"|format(1)``
asks for gigabytes in one step. So every render gets a :class:`RenderBudget` (per render, in a
context variable) that these spend from:

- each loop iteration (every ``{% for %}`` iterates through the ``runner_loop`` filter, put
  there when the template is compiled: see :class:`BudgetingTransformer`),
- each call (macros included), attribute or item lookup and intercepted operator,
- each filter, in proportion to the size of what it is given (``runner_measure``), a step
  per item for filters that run Python code per item (``sort``, ``map``, ...);

and, once :data:`MAX_SECONDS` have passed, the next step stops the render. Values a template
makes are bounded too: a filter's, a call's, an operator's or a ``~`` concatenation's result
may not pass :data:`MAX_VALUE_SIZE` characters or items, and the filters and ``str`` methods
that could make a huge value in one step (``replace``, ``center``, ``indent``, ``format``,
``join``, ``wordwrap``, ``ljust`` ...) check the size they would make before making it.

Every refusal is a :class:`TemplateTooCostly`, a sandbox ``SecurityError``: reported at
validate time for a template that always does it, at run time with the template's place.
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, TypeVar

from jinja2 import nodes, pass_environment
from jinja2.compiler import CodeGenerator, Frame
from jinja2.exceptions import SecurityError
from jinja2.filters import make_attrgetter
from jinja2.runtime import LoopContext, Macro
from jinja2.visitor import NodeTransformer

MAX_STEPS = 1_000_000
"""Loop iterations, calls, lookups and operations, and filter work (see :func:`filter_steps`)."""
MAX_SECONDS = 10.0
"""Wall-clock seconds of one render (checked at every step)."""
MAX_POOL_STEPS, MAX_POOL_SECONDS = 20 * MAX_STEPS, 60.0
"""What the template checks of one validation may spend together (see :class:`Pool`)."""
MAX_VALUE_SIZE = 1_000_000
"""Characters (or items) of any one value a template makes; also the rendered text's limit."""
MAX_INT_BITS = 100_000
"""Bits of an integer a template computes (about 30,000 decimal digits)."""
MAX_OPTION = 1_000
"""A ``tojson`` indent, or an ``urlize`` target or rel, longer than this is refused."""
LINEAR_ITEMS_PER_STEP = 16
"""A filter that makes one pass in C over what it is given (``upper``, ``replace``, ``list``)
spends a step per this many characters or items."""
PER_ITEM_FILTERS = frozenset({
    "sort", "unique", "groupby", "dictsort", "map", "select", "reject", "selectattr", "rejectattr", "min", "max", "batch", "slice",
})  # fmt: skip
"""Filters that run Python code (a key, a test, an attribute lookup) per item: a step each."""
CONSTANT_FILTERS = frozenset({"length", "count", "first", "last", "default", "d", "safe", "abs", "int", "float", "bool", "round", "random"})
"""Filters whose work does not grow with what they are given: one step."""
MACRO_STEPS, RECURSION_STEPS = 10, 50
"""What calling a macro, or a recursive loop's ``loop(...)``, spends (a template body's frame)."""

LOOP_FILTER, CHECK_FILTER = "runner_loop", "runner_checked"
MEASURE_FILTERS = {"linear": "runner_measure", "per_item": "runner_measure_items", "constant": "runner_measure_once"}
_OWN_FILTERS = frozenset({LOOP_FILTER, CHECK_FILTER, *MEASURE_FILTERS.values()})
_T = TypeVar("_T")


class TemplateTooCostly(SecurityError):
    """A render went past its step budget, its deadline, or a value size."""


@dataclass
class RenderBudget:
    """What one render may still spend."""

    steps_left: int = MAX_STEPS
    deadline: float = field(default_factory=lambda: time.monotonic() + MAX_SECONDS)

    def spend(self, steps: int = 1) -> None:
        self.steps_left -= steps
        if self.steps_left < 0:
            raise TemplateTooCostly(
                f"the template does too much work: more than {MAX_STEPS:,} steps (loop iterations, calls, lookups, "
                "filtered items); loop over less, or do the work in a step and template its result"
            )
        if time.monotonic() > self.deadline:
            raise TemplateTooCostly(
                f"the template does too much work: rendering took more than {MAX_SECONDS:g} s; loop over less, or do "
                "the work in a step and template its result"
            )


_CURRENT: ContextVar[RenderBudget | None] = ContextVar("runner_template_budget", default=None)


@dataclass
class Pool:
    """What all the renders of one ``runner validate`` may spend together: a configuration of
    ten thousand costly templates must not make validating it take hours."""

    steps_left: int = MAX_POOL_STEPS
    deadline: float = field(default_factory=lambda: time.monotonic() + MAX_POOL_SECONDS)

    def affords_a_render(self) -> bool:
        """Whether a whole render's budget is left (a check never runs on less, so a template
        is never blamed for what the ones before it spent)."""
        return self.steps_left >= MAX_STEPS and time.monotonic() + MAX_SECONDS <= self.deadline


_POOL: ContextVar[Pool | None] = ContextVar("runner_template_pool", default=None)


@contextmanager
def _current(variable: ContextVar[_T | None], value: _T) -> Iterator[_T]:
    """``value`` as ``variable``'s value inside the block (the one before it restored after)."""
    token = variable.set(value)
    try:
        yield value
    finally:
        variable.reset(token)


def shared_pool() -> AbstractContextManager[Pool]:
    """A :class:`Pool` for the template checks inside the block."""
    return _current(_POOL, Pool())


def render_affordable() -> bool:
    """Whether a template check may render now (always, outside a :func:`shared_pool`)."""
    pool = _POOL.get()
    return pool is None or pool.affords_a_render()


@contextmanager
def budgeted() -> Iterator[RenderBudget]:
    """A fresh budget for the renders inside the block (one template render); what it spends
    is taken from the current :class:`Pool`, if any."""
    with _current(_CURRENT, RenderBudget()) as budget:
        try:
            yield budget
        finally:
            pool = _POOL.get()
            if pool is not None:
                pool.steps_left -= MAX_STEPS - max(budget.steps_left, 0)


def spend(steps: int = 1) -> None:
    """Spend from the current render's budget (nothing outside a render)."""
    budget = _CURRENT.get()
    if budget is not None:
        budget.spend(steps)


def size_of(value: Any) -> int:
    """Characters or items of a sized value (a range counts its items), else 0."""
    if isinstance(value, str | bytes | list | tuple | dict | set | frozenset | range):
        return len(value)
    return 0


def bounded_value(value: Any) -> Any:
    """``value``, unless it is larger than :data:`MAX_VALUE_SIZE` or :data:`MAX_INT_BITS`."""
    size = size_of(value)
    if size > MAX_VALUE_SIZE:
        raise TemplateTooCostly(f"the template made a value of {size:,} characters or items (at most {MAX_VALUE_SIZE:,})")
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > MAX_INT_BITS:
        raise TemplateTooCostly(f"the template made an integer of more than {MAX_INT_BITS:,} bits")
    return value


def would_make(size: float, what: str) -> None:
    """Refuse before making a value of ``size`` characters or items."""
    if size > MAX_VALUE_SIZE:
        raise TemplateTooCostly(f"{what} would make a value of about {int(size):,} characters or items (at most {MAX_VALUE_SIZE:,})")


# --- compiling: every loop and filter goes through the budget ------------------------------


class BudgetingTransformer(NodeTransformer):
    """Rewrites a parsed template so that its loops and filters spend from the budget."""

    def visit_For(self, node: nodes.For) -> nodes.Node:
        self.generic_visit(node)
        node.iter = _filter(node.iter, LOOP_FILTER)
        return node

    def visit_Filter(self, node: nodes.Filter) -> nodes.Node:
        self.generic_visit(node)
        if node.name in _OWN_FILTERS or node.node is None:  # node None: a {% filter %} block's filter
            return node
        node.node = _filter(node.node, MEASURE_FILTERS[filter_cost(node.name)])
        return _filter(node, CHECK_FILTER)


def filter_cost(name: str) -> str:
    """How the filter ``name`` spends: ``constant``, ``per_item`` or ``linear`` in what it is given."""
    if name in CONSTANT_FILTERS:
        return "constant"
    return "per_item" if name in PER_ITEM_FILTERS else "linear"


def _filter(node: nodes.Node, name: str) -> nodes.Filter:
    return nodes.Filter(node, name, [], [], None, None, lineno=node.lineno)


class BudgetedCodeGenerator(CodeGenerator):
    """Jinja's code generator, with ``~`` concatenations checked for size."""

    def visit_Concat(self, node: nodes.Concat, frame: Frame) -> None:
        self.write("environment.bounded_value(")
        super().visit_Concat(node, frame)
        self.write(")")


def _loop(iterable: Any) -> Iterator[Any]:
    for item in iterable:
        spend()
        yield item


def _measure(value: Any) -> Any:
    spend(1 + size_of(value) // LINEAR_ITEMS_PER_STEP)
    return value


def _measure_items(value: Any) -> Any:
    spend(1 + size_of(value))
    return value


def _measure_once(value: Any) -> Any:
    spend()
    return value


BUDGET_FILTERS: dict[str, Callable[..., Any]] = {
    LOOP_FILTER: _loop, CHECK_FILTER: bounded_value, MEASURE_FILTERS["linear"]: _measure,
    MEASURE_FILTERS["per_item"]: _measure_items, MEASURE_FILTERS["constant"]: _measure_once,
}  # fmt: skip


# --- operators and calls -------------------------------------------------------------------

_PERCENT_FIELD = re.compile(r"%(?:\([^)]*\))?[#0 +-]*(\*|\d+)?(?:\.(\*|\d+))?")


def check_binop(operator: str, left: Any, right: Any) -> None:
    """Refuse ``left <operator> right`` when its result would be too large to make."""
    if operator == "*":
        for sequence, count in ((left, right), (right, left)):
            if size_of(sequence) and _is_int(count):
                would_make(size_of(sequence) * count, "repeating a value")
        if _is_int(left) and _is_int(right):
            _int_bits(left.bit_length() + right.bit_length())
    elif operator == "**" and _is_int(right) and right > 0 and isinstance(left, int | float) and not isinstance(left, bool):
        if isinstance(left, int) and abs(left) > 1:
            _int_bits(left.bit_length() * right)
        elif isinstance(left, float) and right > MAX_INT_BITS:
            _int_bits(right)
    elif operator == "+" and isinstance(left, str | list | tuple) and isinstance(right, str | list | tuple):
        would_make(len(left) + len(right), "adding these values")
    elif operator == "%" and isinstance(left, str):
        check_format(left, right if isinstance(right, tuple) else (right,))


def check_format(template: str, args: tuple[Any, ...]) -> None:
    """Refuse a ``%``-format whose widths or precisions would pad past the value size limit."""
    numbers = iter(a for a in args if _is_int(a))
    for width, precision in _PERCENT_FIELD.findall(template):
        for part in (width, precision):
            value = next(numbers, 0) if part == "*" else int(part) if part else 0
            would_make(value, "a %-format width or precision")


def check_call(function: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Spend for a call (a macro's or a recursive loop's is a whole template body:
    :data:`MACRO_STEPS`); refuse a
    call of a ``str``/``bytes``/``list``/``dict``/``set`` method that would make a value too
    large (other calls are checked after the fact)."""
    spend(MACRO_STEPS if isinstance(function, Macro) else RECURSION_STEPS if isinstance(function, LoopContext) else 1)
    owner, name = getattr(function, "__self__", None), getattr(function, "__name__", "")
    if isinstance(owner, str | bytes):
        _check_text_method(owner, name, args, kwargs)
    elif isinstance(owner, list | dict | set) and name in ("extend", "update", "__iadd__") and args:
        would_make(len(owner) + sum(size_of(a) or 1 for a in args), f"{type(owner).__name__}.{name}")


def _check_text_method(text: str | bytes, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    first: Any = args[0] if args else None
    if name in ("ljust", "rjust", "center", "zfill") and _is_int(first):
        would_make(first, f"str.{name}")
    elif name == "expandtabs":
        tab: Any = first if _is_int(first) else kwargs.get("tabsize", 8)
        tabs = text.count("\t") if isinstance(text, str) else text.count(b"\t")
        would_make(len(text) + tabs * (tab if _is_int(tab) else 8), "str.expandtabs")
    elif name == "replace" and len(args) >= 2:
        would_make(_replaced_size(text, args[0], args[1], args[2] if len(args) > 2 else -1), "str.replace")
    elif name == "join" and first is not None:
        items = first if isinstance(first, list | tuple) else ()
        would_make(sum(size_of(i) for i in items) + len(text) * max(len(items) - 1, 0), "str.join")
    elif name == "translate" and isinstance(first, dict):
        longest = max((size_of(v) for v in first.values()), default=1)
        would_make(len(text) * max(longest, 1), "str.translate")


def _replaced_size(text: Any, old: Any, new: Any, count: Any) -> float:
    if not isinstance(old, str | bytes) or not isinstance(new, str | bytes):
        return len(text)
    found = text.count(old) if old else len(text) + 1
    if _is_int(count) and count >= 0:
        found = min(found, count)
    return len(text) + found * (len(new) - len(old))


def check_result(function: Any, result: Any) -> Any:
    """After a call: its result, and the container a method changed, must be within bounds."""
    owner = getattr(function, "__self__", None)
    if isinstance(owner, list | dict | set):
        bounded_value(owner)
    return bounded_value(result)


def _int_bits(bits: float) -> None:
    if bits > MAX_INT_BITS:
        raise TemplateTooCostly(f"the template would compute an integer of about {int(bits):,} bits (at most {MAX_INT_BITS:,})")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# --- filters that could make a huge value in one step --------------------------------------


def guarded_filters(filters: dict[str, Callable[..., Any]]) -> dict[str, Callable[..., Any]]:
    """Jinja's filters with the size checks they need (the same names and signatures)."""
    guarded = {name: _guard(filters[name], check) for name, check in _FILTER_CHECKS.items() if name in filters}
    guarded["join"] = _bounded_join(filters["join"])
    guarded["sum"] = _bounded_sum
    return guarded


def _guard(original: Callable[..., Any], check: Callable[..., None]) -> Callable[..., Any]:
    """``original`` (its pass-context marker kept), after ``check`` has seen its arguments."""
    passes = getattr(original, "jinja_pass_arg", None) is not None

    @functools.wraps(original)
    def filtered(*args: Any, **kwargs: Any) -> Any:
        check(*(args[1:] if passes else args), **kwargs)
        return original(*args, **kwargs)

    return filtered


def _check_replace(s: Any, old: Any = "", new: Any = "", count: Any = None) -> None:
    would_make(_replaced_size(str(s), str(old), str(new), count if count is not None else -1), "replace")


def _check_center(value: Any, width: Any = 80) -> None:
    if _is_int(width):
        would_make(width, "center")


def _check_indent(s: Any, width: Any = 4, first: Any = False, blank: Any = False) -> None:
    step = len(width) if isinstance(width, str) else width if _is_int(width) else 4
    text = str(s)
    would_make(len(text) + (text.count("\n") + 1) * step, "indent")


def _check_format(value: Any, *args: Any, **kwargs: Any) -> None:
    check_format(str(value), args)


def _check_wordwrap(s: Any, width: Any = 79, break_long_words: Any = True, wrapstring: Any = None, break_on_hyphens: Any = True) -> None:
    text, wrap = str(s), len(wrapstring) if isinstance(wrapstring, str) else 1
    would_make(len(text) + (len(text) // max(width if _is_int(width) else 79, 1) + 1) * wrap, "wordwrap")


def _check_tojson(value: Any, indent: Any = None) -> None:
    if (_is_int(indent) and indent > MAX_OPTION) or (isinstance(indent, str) and len(indent) > MAX_OPTION):
        raise TemplateTooCostly(f"tojson: an indent of at most {MAX_OPTION}")


def _check_urlize(value: Any, *args: Any, **kwargs: Any) -> None:
    for option in ("target", "rel"):
        if size_of(kwargs.get(option)) > MAX_OPTION:
            raise TemplateTooCostly(f"urlize: a {option} of at most {MAX_OPTION} characters")


def _check_batch(value: Any, linecount: Any = 1, fill_with: Any = None) -> None:
    if _is_int(linecount):
        would_make(linecount, "batch")


def _check_slice(value: Any, slices: Any = 1, fill_with: Any = None) -> None:
    if _is_int(slices):
        would_make(slices, "slice")


_FILTER_CHECKS: dict[str, Callable[..., None]] = {
    "replace": _check_replace, "center": _check_center, "indent": _check_indent, "format": _check_format,
    "wordwrap": _check_wordwrap, "tojson": _check_tojson, "urlize": _check_urlize, "batch": _check_batch,
    "slice": _check_slice,
}  # fmt: skip


def _bounded_join(original: Callable[..., Any]) -> Callable[..., Any]:
    """``join``: its items taken first, the result's size checked before joining."""

    @functools.wraps(original)
    def join(eval_ctx: Any, value: Iterable[Any], d: Any = "", attribute: Any = None) -> Any:
        items = list(value)
        if attribute is not None:
            getter = make_attrgetter(eval_ctx.environment, attribute)
            items, attribute = [getter(item) for item in items], None
        would_make(sum(len(str(item)) for item in items) + len(str(d)) * max(len(items) - 1, 0), "join")
        return original(eval_ctx, items, d, attribute)

    return join


@pass_environment
def _bounded_sum(environment: Any, iterable: Iterable[Any], attribute: Any = None, start: Any = 0) -> Any:
    """``sum``, a step per item in proportion to the running total (adding lists is quadratic)."""
    getter = make_attrgetter(environment, attribute) if attribute is not None else None
    total = start
    for item in iterable:
        spend(1 + size_of(total) // LINEAR_ITEMS_PER_STEP)
        total = bounded_value(total + (getter(item) if getter else item))
    return total


def bounded_lipsum(original: Callable[..., Any]) -> Callable[..., Any]:
    """``lipsum(n, html, min, max)`` with at most :data:`MAX_VALUE_SIZE` words."""

    @functools.wraps(original)
    def lipsum(n: Any = 5, html: Any = True, min: Any = 20, max: Any = 100) -> Any:
        if _is_int(n) and _is_int(max):
            would_make(n * max, "lipsum")
        return original(n, html, min, max)

    return lipsum


