"""YAML 1.2 core-schema scalars: what editors and JSON Schema tools read, and what runner reads.

PyYAML resolves plain scalars by YAML 1.1's rules, under which ``yes``/``no``/``on``/``off``
are booleans, ``1_000`` and ``1:30`` (sexagesimal) are integers, ``017`` is octal and ``1e-2``
is a string. The YAML 1.2 core schema (yaml-language-server, check-jsonschema, ruamel.yaml)
reads ``yes`` and ``1_000`` as strings, ``017`` as 17, ``0o17`` as 15 and ``1e-2`` as a number.
:class:`CoreResolver` gives the loader the 1.2 reading; :func:`yaml11_difference` says, for a
plain scalar, what YAML 1.1 would have read instead and what to write, so that a file relying
on the old meaning gets a located error with the fix (see :mod:`runner.config.yamlload`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

from yaml.nodes import ScalarNode
from yaml.resolver import BaseResolver, Resolver

NULL = "tag:yaml.org,2002:null"
BOOL = "tag:yaml.org,2002:bool"
INT = "tag:yaml.org,2002:int"
FLOAT = "tag:yaml.org,2002:float"
STR = "tag:yaml.org,2002:str"

_CORE = [  # the YAML 1.2.2 core schema, section 10.3.2
    (NULL, r"~|null|Null|NULL|", [*"~nN", ""]),
    (BOOL, r"true|True|TRUE|false|False|FALSE", list("tTfF")),
    (INT, r"[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+", list("-+0123456789")),
    (FLOAT, r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)",
     list("-+.0123456789")),
]  # fmt: skip


class CoreResolver(BaseResolver):
    """PyYAML's resolver with the implicit tags of the YAML 1.2 core schema (no timestamps,
    no merge keys, no ``yes``/``on``, no sexagesimal or underscored numbers)."""


for _tag, _pattern, _first in _CORE:
    CoreResolver.add_implicit_resolver(_tag, re.compile(f"^(?:{_pattern})$"), _first)


def core_int(text: str) -> int:
    """A plain scalar the core schema reads as an integer (``-12``, ``0o17``, ``0x1F``)."""
    if text.startswith("0o"):
        return int(text[2:], 8)
    if text.startswith("0x"):
        return int(text[2:], 16)
    return int(text, 10)


def core_float(text: str) -> float:
    """A plain scalar the core schema reads as a float (``1e-2``, ``.5``, ``-.inf``, ``.nan``)."""
    lowered = text.lower()
    if lowered.lstrip("+-") == ".inf":
        return float(lowered.replace(".inf", "inf"))
    if lowered == ".nan":
        return float("nan")
    return float(text)


@dataclass(frozen=True)
class Yaml11Difference:
    """How YAML 1.1 would read a plain scalar that YAML 1.2 reads otherwise, and the fix."""

    text: str
    """The scalar as written."""
    meaning: str
    """What YAML 1.1 reads, e.g. ``the boolean true`` or ``the integer 90``."""
    fix: str
    """What to write for that meaning in YAML 1.2, e.g. ``write true``."""
    ambiguous: bool
    """Both readings are numbers with different values (``017``): an error wherever it stands."""

    def explain(self, now: str) -> str:
        """The sentence for a problem at this value: ``yes is a string in YAML 1.2 ...``."""
        return f"{self.text} is {now} in YAML 1.2, which runner reads as editors do (YAML 1.1 read {self.meaning}); {self.fix}"


_YAML11_BOOLEANS = {"yes": True, "no": False, "on": True, "off": False}


@cache
def _yaml11_resolver() -> Resolver:
    return Resolver()


def yaml11_difference(text: str, core_tag: str) -> Yaml11Difference | None:
    """For a plain scalar ``text`` that the core schema tags ``core_tag``: how YAML 1.1 reads
    it when that differs (another type, or another number), else ``None``."""
    old_tag = _yaml11_resolver().resolve(ScalarNode, text, (True, False))
    if old_tag == core_tag == STR or old_tag == core_tag == NULL or old_tag == core_tag == BOOL:
        return None
    if old_tag == BOOL:
        value = _YAML11_BOOLEANS.get(text.lower(), text.lower() == "true")
        return Yaml11Difference(text, f"the boolean {str(value).lower()}", f"for a boolean write {str(value).lower()}, for text quote it", False)
    if old_tag in (INT, FLOAT) and core_tag == STR:
        number = _yaml11_number(text, old_tag)
        return Yaml11Difference(text, f"the number {number}", f"for a number write {number}, for text quote it", False)
    if old_tag == INT and core_tag == INT:
        old, new = _yaml11_number(text, old_tag), core_int(text)
        if old == new:
            return None
        return Yaml11Difference(text, f"the octal number {old}", f"write {new} (or 0o{text.lstrip('+-0')} for octal {old})", True)
    if old_tag == STR and core_tag in (INT, FLOAT):
        return Yaml11Difference(text, "a string", f"for text quote it: '{text}'", False)
    return None


def _yaml11_number(text: str, tag: str) -> int | float:
    from yaml.constructor import SafeConstructor

    node = ScalarNode(tag, text)
    constructor = SafeConstructor()
    value: int | float = constructor.construct_yaml_int(node) if tag == INT else constructor.construct_yaml_float(node)
    return value
