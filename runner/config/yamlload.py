"""A strict YAML loader that keeps the source position of every node.

Stricter than ``yaml.safe_load`` (see ``shared/SECURITY.md``):

* the file size is capped before parsing;
* anchors and aliases are rejected (alias bombs);
* duplicate keys are an error naming both lines;
* plain scalars are read by the YAML 1.2 core schema, as editors and JSON Schema tools read
  them (:mod:`runner.config.yamlcore`: ``yes``, ``on``, ``1_000`` and ``1:30`` are strings,
  ``0o20`` and ``1e-2`` numbers); where YAML 1.1 read a plain scalar otherwise the document
  remembers how (``SourceMap.yaml11``), so a schema error there says what to write, and a
  number that both read with different values (``017``) is an error wherever it stands;
* only the standard scalar tags are accepted; timestamps stay strings;
* ``.nan`` / ``.inf`` are rejected anywhere;
* nesting is limited to :data:`MAX_DEPTH` levels (the composer recurses per level, so a file
  of 50,000 ``[`` would otherwise end in a ``RecursionError``);
* the file is opened without blocking and must be a regular file (a FIFO or a device
  named ``*.yaml`` is refused instead of hanging the loader).

Positions are kept per JSON pointer: where the key is written and where the value is,
1-based, so errors can point at the key for unknown keys and at the value for bad values.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
import yaml.reader
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.parser import Parser
from yaml.reader import Reader
from yaml.scanner import Scanner

from runner.config.documents import (
    MAX_CONFIG_BYTES,
    Document,
    Position,
    SourceMap,
    YamlError,
    escape_pointer_token,
    file_kind,
    read_config_bytes,
)
from runner.config.yamlcore import CoreResolver, core_float, core_int, yaml11_difference
from runner.errors import Problem

__all__ = [
    "MAX_CONFIG_BYTES",
    "MAX_DEPTH",
    "Document",
    "Position",
    "SourceMap",
    "YamlError",
    "escape_pointer_token",
    "file_kind",
    "load_documents",
    "load_text",
    "parse_config_bytes",
    "read_config_bytes",
]
MAX_DEPTH = 64
"""Nested mappings and sequences allowed in one document (far beyond any real config)."""

_INT = "tag:yaml.org,2002:int"
_FLOAT = "tag:yaml.org,2002:float"
_BOOL = "tag:yaml.org,2002:bool"
_NULL = "tag:yaml.org,2002:null"
_STR = "tag:yaml.org,2002:str"
_TIMESTAMP = "tag:yaml.org,2002:timestamp"
_MAP = "tag:yaml.org,2002:map"
_SEQ = "tag:yaml.org,2002:seq"


def load_documents(path: Path, display: str | None = None) -> list[Document]:
    """Load every YAML document in ``path`` (``---`` separated), strictly."""
    name = display or str(path)
    return parse_config_bytes(read_config_bytes(path, name), name, path)


def parse_config_bytes(raw: bytes, name: str, path: Path) -> list[Document]:
    """The YAML documents in the bytes of the configuration file ``path`` (UTF-8, with or
    without a BOM); ``name`` is used in error messages."""
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise YamlError(Problem(name, line, 1, "", f"invalid UTF-8 at byte {exc.start}; save the file as UTF-8")) from None
    return load_text(text, name, path)


def load_text(text: str, name: str, path: Path | None = None) -> list[Document]:
    """Parse YAML text into documents. ``name`` is used in error messages.

    libyaml parses (when PyYAML has it: about ten times faster); a text it refuses is parsed
    again by PyYAML's own parser, whose messages say more (what it found instead) and which
    meets the nesting limit before libyaml's own, so an error reads the same either way.
    """
    if _FastLoader is None:
        return _load(_PyLoader, text, name, path)
    try:
        return _load(_FastLoader, text, name, path)
    except YamlError:
        return _load(_PyLoader, text, name, path)  # raises, with PyYAML's message


def _load(loader_type: Callable[[str], Any], text: str, name: str, path: Path | None) -> list[Document]:
    try:
        loader = loader_type(text)
    except UnicodeError:  # a lone surrogate (libyaml encodes the text): no decoded file holds one
        raise YamlError(Problem(name, 1, 1, "", "the text is not valid Unicode; save the file as UTF-8")) from None
    except yaml.reader.ReaderError as exc:  # PyYAML checks every character up front
        raise _unprintable(text, exc, name) from None
    documents = []
    try:
        while loader.check_node():
            node = loader.get_node()
            if node is None:
                continue
            source = SourceMap(name)
            data = _convert(node, "", source)
            documents.append(Document(path or Path(name), data, source))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        what = exc.problem or exc.context or "invalid YAML"
        if isinstance(exc, _TooDeep):
            raise YamlError(Problem(name, line, col, exc.pointer, str(what))) from None
        if "alias" in str(what) or "anchor" in str(what):
            what = _NO_ANCHORS
        raise YamlError(Problem(name, line, col, "", f"YAML syntax: {what}")) from None
    except yaml.reader.ReaderError as exc:
        raise _unprintable(text, exc, name) from None
    except yaml.YAMLError as exc:
        raise YamlError(Problem(name, 1, 1, "", f"YAML syntax: {exc}")) from None
    finally:
        loader.dispose()
    return documents


def _unprintable(text: str, exc: yaml.reader.ReaderError, name: str) -> YamlError:
    """A character YAML does not allow, at ``exc.position`` of ``text``."""
    before = text[: exc.position]
    line, col = before.count("\n") + 1, exc.position - before.rfind("\n")
    what = f"U+{exc.character:04X}" if isinstance(exc.character, int) else repr(exc.character)
    return YamlError(Problem(name, line, col, "", f"character {what} is not allowed in YAML (only printable characters are); remove it"))


def _pos(node: Node) -> Position:
    return Position(node.start_mark.line + 1, node.start_mark.column + 1)


def _fail(node: Node, pointer: str, source: SourceMap, message: str) -> YamlError:
    pos = _pos(node)
    return YamlError(Problem(source.file, pos.line, pos.column, pointer, message))


def _convert(node: Node, pointer: str, source: SourceMap) -> Any:
    source.values[pointer] = _pos(node)
    if isinstance(node, MappingNode):
        return _convert_mapping(node, pointer, source)
    if isinstance(node, SequenceNode):
        if node.tag != _SEQ:
            raise _fail(node, pointer, source, f"tag {node.tag!r} is not allowed")
        return [_convert(item, f"{pointer}/{i}", source) for i, item in enumerate(node.value)]
    assert isinstance(node, ScalarNode)
    return _convert_scalar(node, pointer, source)


def _convert_mapping(node: MappingNode, pointer: str, source: SourceMap) -> dict[str, Any]:
    if node.tag != _MAP:
        raise _fail(node, pointer, source, f"tag {node.tag!r} is not allowed")
    out: dict[str, Any] = {}
    first_seen: dict[str, Position] = {}
    for key_node, value_node in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge" or (key_node.value == "<<" and not getattr(key_node, "style", "x")):
            raise _fail(key_node, pointer, source, "merge keys (<<) are not allowed; write the keys out")
        if not isinstance(key_node, ScalarNode):
            raise _fail(key_node, pointer, source, "keys must be plain strings")
        key = str(key_node.value)
        child = f"{pointer}/{escape_pointer_token(key)}"
        if key in first_seen:
            raise _fail(
                key_node, child, source,
                f"duplicate key '{key}' (first defined on line {first_seen[key].line}); remove one of them",
            )
        first_seen[key] = _pos(key_node)
        source.keys[child] = _pos(key_node)
        out[key] = _convert(value_node, child, source)
    return out


def _convert_scalar(node: ScalarNode, pointer: str, source: SourceMap) -> Any:
    tag, value = node.tag, node.value
    if not node.style:  # plain (None from PyYAML, "" from libyaml): resolved by the core schema, where YAML 1.1 may differ
        difference = yaml11_difference(value, tag)
        if difference is not None and difference.ambiguous:
            raise _fail(node, pointer, source, difference.explain(f"the number {core_int(value)}"))
        if difference is not None:
            source.yaml11[pointer] = difference
    if tag in (_STR, _TIMESTAMP):
        return value
    if tag == _NULL:
        return None
    if tag == _BOOL:
        return value.lower() == "true"
    if tag == _INT:
        return _explicit(node, pointer, source, core_int)
    if tag == _FLOAT:
        number = _explicit(node, pointer, source, core_float)
        if math.isnan(number) or math.isinf(number):
            raise _fail(node, pointer, source, f"{value} is not allowed; use a finite number")
        return number
    raise _fail(node, pointer, source, f"tag {tag!r} is not allowed; only plain YAML values are accepted")


def _explicit(node: ScalarNode, pointer: str, source: SourceMap, read: Callable[[str], Any]) -> Any:
    """A number in the core schema's form (``!!int 0o17`` too); another form under an explicit tag is an error."""
    try:
        return read(node.value)
    except ValueError:
        raise _fail(node, pointer, source, f"{node.value!r} is not a YAML 1.2 {node.tag.rsplit(':', 1)[-1]}") from None
_NO_ANCHORS = "anchors and aliases (&name, *name) are not allowed in configuration; write the value out"


class _StrictComposer(Composer, SafeConstructor, CoreResolver):
    """PyYAML's safe composer and constructor, refusing anchors and aliases as soon as it
    meets them, and nesting deeper than :data:`MAX_DEPTH` before it recurses into it.
    A loader adds a parser (the events: libyaml's or PyYAML's, alike)."""

    def __init__(self) -> None:
        Composer.__init__(self)
        SafeConstructor.__init__(self)
        CoreResolver.__init__(self)
        self._path: list[str] = []

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:  # type: ignore[override]
        event: Any = self.peek_event()  # type: ignore[attr-defined]  # from the parser
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
            raise yaml.MarkedYAMLError(problem=_NO_ANCHORS, problem_mark=event.start_mark)
        if len(self._path) >= MAX_DEPTH:
            raise _TooDeep(self._path, event.start_mark)
        self._path.append(_token(parent, index))
        try:
            return super().compose_node(parent, index)  # type: ignore[no-any-return]
        finally:
            self._path.pop()


class _PyLoader(_StrictComposer, Reader, Scanner, Parser):
    """The strict loader on PyYAML's own reader, scanner and parser."""

    def __init__(self, stream: str):
        Reader.__init__(self, stream)
        Scanner.__init__(self)
        Parser.__init__(self)
        _StrictComposer.__init__(self)


_FastLoader: Callable[[str], Any] | None
try:
    from yaml._yaml import CParser
except ImportError:  # PyYAML built without libyaml
    _FastLoader = None
else:

    class _CLoader(_StrictComposer, CParser):  # type: ignore[misc]
        """The strict loader on libyaml's scanner and parser."""

        def __init__(self, stream: str):
            CParser.__init__(self, stream)
            _StrictComposer.__init__(self)

    _FastLoader = _CLoader


class _TooDeep(yaml.MarkedYAMLError):
    """Nesting beyond MAX_DEPTH; carries the JSON pointer of the node that went too deep."""

    def __init__(self, path: list[str], mark: Any):
        self.pointer = "".join(f"/{escape_pointer_token(t)}" for t in path[1:])
        super().__init__(
            problem=f"nested more than {MAX_DEPTH} levels deep; flatten the structure "
            "(configuration is limited to this depth)",
            problem_mark=mark,
        )


def _token(parent: Node | None, index: Any) -> str:
    """The pointer token of a node being composed: its key in a mapping, its index in a list."""
    if isinstance(parent, MappingNode) and isinstance(index, ScalarNode):
        return str(index.value)
    return str(index) if isinstance(index, int) else ""
