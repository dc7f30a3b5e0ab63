"""Goal and argument templates: Jinja2 in its sandbox, with undefined variables as errors.

Variables available to templates:

* ``inputs.NAME``: the task's typed inputs;
* ``steps.ID.output`` (and ``steps.ID.data``): outputs of steps the template's step depends on;
* ``previous``: the previous completed run of the task with other inputs (``previous.outputs``,
  ``previous.tables``, ``previous.inputs``, ``previous.run_id``, ``previous.date``), when the task
  enables ``memory.previous_run``; otherwise ``None``;
* ``today``: the run's date (ISO), ``run_id``.

Filters beyond Jinja's own: ``add_days`` (``{{ inputs.date | add_days(-7) }}``).

Templates are the configuration author's, but their values (inputs, step outputs) are not,
so rendering is contained: Jinja's sandbox (no ``_`` attributes, no ``str.format``), no
template loader (``include``, ``import`` and ``extends`` have nothing to load), bounded
``*`` and ``**``, a cap on the rendered size, and a budget of work and time per render with
bounded intermediate values (:mod:`runner.config.template_budget`: nested loops, recursive
macros and one-step blow-ups such as ``|replace`` or ``%``-format widths stop with an error).
Every failure, whatever Jinja or Python raised, becomes a :class:`TemplateError` naming the
line of the template and, for a :class:`LocatedTemplate`, the file, line and pointer where
the template was written.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from runner.config.template_types import MAX_RENDERED_CHARS, SYNTAX_MARKERS


def is_plain(template: str) -> bool:
    """Whether ``template`` renders to itself: no template syntax, no carriage return (Jinja
    turns CR LF and lone CRs into LF) and within the size cap. Such text needs no Jinja at all."""
    return (
        len(template) <= MAX_RENDERED_CHARS
        and "\r" not in template
        and not any(marker in template for marker in SYNTAX_MARKERS)
    )


def render(template: str, context: dict[str, Any]) -> str:
    """Render ``template``; any failure (undefined variable, sandbox refusal, an error in an
    expression, output too large) raises :class:`TemplateError`.

    Plain text is returned as it is and a template whose only syntax is ``{{ name.key }}``
    over plain values is substituted, both without loading Jinja (see :func:`is_plain` and
    :func:`substitute`); everything else goes to :mod:`runner.config.template_engine`."""
    if is_plain(template):
        return str(template)
    substituted = substitute(template, context)
    if substituted is not None:
        return substituted
    from runner.config.template_engine import render_template

    return render_template(template, context)


_NAME = r"[A-Za-z][A-Za-z0-9_]*"
_SUBSTITUTION = re.compile(r"\{\{[ \t\n]*(" + _NAME + r"(?:\." + _NAME + r")*)[ \t\n]*\}\}")
_JINJA_WORDS = frozenset({"true", "false", "none", "True", "False", "None", "and", "or", "not", "in", "is", "if", "else"})
_PRINTED_AS_STR = (str, int, float, bool, type(None))
_UNKNOWN = object()


def substitute(template: str, context: Mapping[str, Any]) -> str | None:
    """``template`` rendered as Jinja renders it, when its only syntax is ``{{ a.b.c }}`` whose
    first name is in ``context`` and whose keys are keys of plain dicts (never their methods),
    ending on a string, number, boolean or None (Jinja prints those with ``str``); ``None``
    for anything else (filters, statements, comments, whitespace control, a carriage return,
    a missing name, an output over the size cap): then Jinja must render it."""
    if "\r" in template or "{%" in template or "{#" in template:
        return None
    parts: list[str] = []
    position = 0
    while (start := template.find("{{", position)) >= 0:  # where Jinja's lexer sees the next expression
        match = _SUBSTITUTION.match(template, start)
        value = _lookup(context, match.group(1).split(".")) if match else _UNKNOWN
        if match is None or value is _UNKNOWN:
            return None
        parts += [template[position:start], str(value)]
        position = match.end()
    parts.append(template[position:])
    rendered = "".join(parts)
    return rendered if len(rendered) <= MAX_RENDERED_CHARS else None


def _lookup(context: Mapping[str, Any], path: list[str]) -> Any:
    if any(name in _JINJA_WORDS for name in path) or path[0] not in context:
        return _UNKNOWN
    value = context[path[0]]
    for key in path[1:]:  # Jinja tries the attribute first: a dict's own methods go to Jinja
        if type(value) is not dict or key not in value or hasattr(value, key):
            return _UNKNOWN
        value = value[key]
    return value if type(value) in _PRINTED_AS_STR else _UNKNOWN
