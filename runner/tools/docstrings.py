"""Read a tool's description and parameter descriptions from its docstring.

Google style (``Args:`` sections with ``name (type): text`` entries, continued on
more-indented lines) and Sphinx style (``:param name: text``) are understood; the text
before the first section is the tool description.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass, field

_ARGS_HEADERS = {"args", "arguments", "parameters", "params", "keyword args"}
_OTHER_HEADERS = {
    "returns", "return", "raises", "yields", "examples", "example", "note", "notes",
    "see also", "warning", "warnings", "attributes",
}  # fmt: skip
_ENTRY = re.compile(r"^\*{0,2}([A-Za-z_][A-Za-z0-9_]*)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_SPHINX_PARAM = re.compile(r"^:param\s+(?:[^:]*\s)?([A-Za-z_][A-Za-z0-9_]*)\s*:\s*(.*)$")


@dataclass(frozen=True)
class Docstring:
    """The parts of a docstring a tool needs."""

    description: str = ""
    params: dict[str, str] = field(default_factory=dict)


@dataclass
class _Reader:
    description: list[str] = field(default_factory=list)
    params: dict[str, str] = field(default_factory=dict)
    section: str | None = None
    current: str | None = None
    current_indent: int = 0

    def feed(self, line: str) -> None:
        stripped = line.strip()
        header = stripped[:-1].lower() if stripped.endswith(":") else None
        if header in _ARGS_HEADERS or header in _OTHER_HEADERS:
            self.section, self.current = header, None
        elif (sphinx := _SPHINX_PARAM.match(stripped)) is not None:
            self.section = "sphinx"
            self._start(sphinx.group(1), sphinx.group(2), indent=-1)
        elif stripped.startswith(":"):
            self.section, self.current = "sphinx", None
        elif self.section is None:
            self.description.append(line)
        elif self.section in _ARGS_HEADERS:
            self._args_line(line, stripped)
        elif self.section == "sphinx" and self.current and stripped:
            self._continue(stripped)

    def _args_line(self, line: str, stripped: str) -> None:
        if not stripped:
            return
        indent = len(line) - len(line.lstrip())
        entry = _ENTRY.match(stripped)
        if entry and (self.current is None or indent <= self.current_indent):
            self._start(entry.group(1), entry.group(2), indent)
        elif self.current is not None:
            self._continue(stripped)

    def _start(self, name: str, text: str, indent: int) -> None:
        self.current, self.current_indent = name, indent
        self.params[name] = text.strip()

    def _continue(self, text: str) -> None:
        assert self.current is not None
        self.params[self.current] = f"{self.params[self.current]} {text}".strip()


def parse_docstring(doc: str | None) -> Docstring:
    """Split ``doc`` into the description and the per-parameter descriptions."""
    if not doc:
        return Docstring()
    reader = _Reader()
    for line in inspect.cleandoc(doc).splitlines():
        reader.feed(line)
    return Docstring(description="\n".join(reader.description).strip(), params=reader.params)
