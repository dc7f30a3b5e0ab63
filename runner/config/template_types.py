"""What templates are made of, apart from rendering them: the error, where a template was
written, the variables it reads and the limits. Shared by :mod:`runner.config.templates` (which
renders plain substitutions itself) and :mod:`runner.config.template_engine` (Jinja), so the
engine does not import the module that loads it lazily.
"""

from __future__ import annotations

from dataclasses import dataclass

ROOT_NAMES = ("inputs", "steps", "previous", "today", "run_id")
MAX_RENDERED_CHARS = 1_000_000
"""A rendered template longer than this is an error (a goal is a prompt, not a data dump)."""
MAX_EXPONENT = 1024
SYNTAX_MARKERS = ("{{", "{%", "{#")
"""Where Jinja's syntax starts (expressions, statements, comments)."""


class TemplateError(Exception):
    """A template could not be parsed or rendered; the message says where and why."""


@dataclass(frozen=True)
class Origin:
    """Where a template was written: file, 1-based line and column, JSON pointer."""

    file: str
    line: int
    column: int
    pointer: str


class LocatedTemplate(str):
    """Template text that remembers its :class:`Origin`, so a failure while rendering it
    (at run time, far from the YAML) names the file and line. Behaves as a plain ``str``."""

    origin: Origin

    def __new__(cls, text: str, origin: Origin) -> LocatedTemplate:
        made = super().__new__(cls, text)
        made.origin = origin
        return made


@dataclass(frozen=True)
class Reference:
    """One variable a template reads: ``root`` and the attribute path under it."""

    root: str
    path: tuple[str, ...]
