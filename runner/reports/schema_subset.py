"""A JSON Schema check for the keywords runner's own record schema uses, without jsonschema.

Importing ``jsonschema`` costs a run about 4 MiB of memory (``referencing``, ``rpds``,
``attrs`` and the optional format libraries it loads: ``arrow``, ``dateutil``, ...), more
than the rest of a report. A record the run itself built is almost always valid, so it is
first checked here: :func:`conforms` answers ``True`` only when Draft 2020-12, as
``jsonschema.Draft202012Validator`` (without a format checker) applies it, accepts the
instance. Every other answer is ``False``, and the caller asks jsonschema, which decides
and words the errors. So this check never accepts what jsonschema would refuse:

* each keyword below repeats jsonschema's own rule (its type checker, its ``equal``, its
  ``re.search`` for ``pattern``, its joined regex for additional properties);
* a keyword outside the subset, a ``$ref`` that is not a local JSON pointer, a nested
  ``$id`` or a ``uniqueItems`` over non-strings is :class:`BeyondSubset`: ``False``.

``tests/reports/test_schema_subset.py`` compares the two on valid records and on many
broken ones.
"""

from __future__ import annotations

import numbers
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

ANNOTATIONS = frozenset(
    {"description", "title", "$schema", "$defs", "$comment", "format", "default", "examples", "deprecated",
     "readOnly", "writeOnly"}
)
"""Keywords that never change validity (``format`` is an annotation without a format checker)."""


class BeyondSubset(Exception):
    """The schema uses something this check does not decide: jsonschema must."""


def conforms(instance: Any, schema: Mapping[str, Any] | bool) -> bool:
    """``True`` when ``instance`` is valid against ``schema`` for certain; ``False`` when it is
    not, or when the schema needs more than this module knows (then ask jsonschema)."""
    try:
        return _Check(schema).valid(instance, schema, top=True)
    except BeyondSubset:
        return False


class _Check:
    def __init__(self, root: Mapping[str, Any] | bool) -> None:
        self.root = root

    def valid(self, instance: Any, schema: Any, *, top: bool = False) -> bool:
        if schema is True or schema is False:
            return schema
        if not isinstance(schema, Mapping):
            raise BeyondSubset(f"a schema that is not an object: {schema!r}")
        if "$id" in schema and not top:
            raise BeyondSubset("a nested $id changes how references resolve")
        for keyword, value in schema.items():
            if keyword in ANNOTATIONS or (keyword == "$id" and top):
                continue
            rule = _RULES.get(keyword)
            if rule is None:
                raise BeyondSubset(f"keyword {keyword!r}")
            if not rule(self, value, instance, schema):
                return False
        return True

    def resolve(self, reference: str) -> Any:
        if not reference.startswith("#") or "%" in reference:
            raise BeyondSubset(f"reference {reference!r}")
        target: Any = self.root
        for token in reference[1:].split("/")[1:]:
            token = token.replace("~1", "/").replace("~0", "~")
            if isinstance(target, Mapping) and token in target:
                target = target[token]
            else:
                raise BeyondSubset(f"unresolvable reference {reference!r}")
        return target


# --- jsonschema's type checker (Draft 2020-12) and equality -----------------------------------


def _is_number(instance: Any) -> bool:
    return isinstance(instance, numbers.Number) and not isinstance(instance, bool)


def _is_integer(instance: Any) -> bool:
    if isinstance(instance, bool):
        return False
    return isinstance(instance, int) or (isinstance(instance, float) and instance.is_integer())


TYPES = {
    "array": lambda instance: isinstance(instance, list),
    "boolean": lambda instance: isinstance(instance, bool),
    "integer": _is_integer,
    "null": lambda instance: instance is None,
    "number": _is_number,
    "object": lambda instance: isinstance(instance, dict),
    "string": lambda instance: isinstance(instance, str),
}


def _is_type(instance: Any, name: str) -> bool:
    check = TYPES.get(name)
    if check is None:
        raise BeyondSubset(f"type {name!r}")
    return check(instance)


def _unbool(value: Any) -> Any:
    return ("bool", value) if isinstance(value, bool) else value


def _equal(one: Any, two: Any) -> bool:
    if one is two:
        return True
    if isinstance(one, str) or isinstance(two, str):
        return bool(one == two)
    if isinstance(one, Sequence) and isinstance(two, Sequence):
        return len(one) == len(two) and all(_equal(a, b) for a, b in zip(one, two, strict=True))
    if isinstance(one, Mapping) and isinstance(two, Mapping):
        return one.keys() == two.keys() and all(_equal(one[key], two[key]) for key in one)
    return bool(_unbool(one) == _unbool(two))


# --- the keywords -----------------------------------------------------------------------------


def _type(check: _Check, names: Any, instance: Any, schema: Any) -> bool:
    return any(_is_type(instance, name) for name in ([names] if isinstance(names, str) else names))


def _ref(check: _Check, reference: str, instance: Any, schema: Any) -> bool:
    return check.valid(instance, check.resolve(reference))


def _properties(check: _Check, properties: Mapping[str, Any], instance: Any, schema: Any) -> bool:
    if not isinstance(instance, dict):
        return True
    return all(check.valid(instance[name], sub) for name, sub in properties.items() if name in instance)


def _pattern_properties(check: _Check, patterns: Mapping[str, Any], instance: Any, schema: Any) -> bool:
    if not isinstance(instance, dict):
        return True
    return all(
        check.valid(value, sub) for pattern, sub in patterns.items() for key, value in instance.items()
        if re.search(pattern, key)
    )


def _additional_properties(check: _Check, extra_schema: Any, instance: Any, schema: Any) -> bool:
    if not isinstance(instance, dict):
        return True
    properties = schema.get("properties", {})
    patterns = "|".join(schema.get("patternProperties", {}))
    extras = [key for key in instance if key not in properties and not (patterns and re.search(patterns, key))]
    if isinstance(extra_schema, dict):
        return all(check.valid(instance[key], extra_schema) for key in extras)
    return bool(extra_schema) or not extras


def _required(check: _Check, names: Sequence[str], instance: Any, schema: Any) -> bool:
    return not isinstance(instance, dict) or all(name in instance for name in names)


def _items(check: _Check, items: Any, instance: Any, schema: Any) -> bool:
    if "prefixItems" in schema:
        raise BeyondSubset("prefixItems")
    if not isinstance(instance, list):
        return True
    return all(check.valid(item, items) for item in instance)


def _enum(check: _Check, allowed: Sequence[Any], instance: Any, schema: Any) -> bool:
    return any(_equal(each, instance) for each in allowed)


def _const(check: _Check, value: Any, instance: Any, schema: Any) -> bool:
    return _equal(instance, value)


def _minimum(check: _Check, bound: Any, instance: Any, schema: Any) -> bool:
    return not _is_number(instance) or not instance < bound


def _maximum(check: _Check, bound: Any, instance: Any, schema: Any) -> bool:
    return not _is_number(instance) or not instance > bound


def _min_length(check: _Check, bound: int, instance: Any, schema: Any) -> bool:
    return not isinstance(instance, str) or len(instance) >= bound


def _max_length(check: _Check, bound: int, instance: Any, schema: Any) -> bool:
    return not isinstance(instance, str) or len(instance) <= bound


def _pattern(check: _Check, pattern: str, instance: Any, schema: Any) -> bool:
    return not isinstance(instance, str) or re.search(pattern, instance) is not None


def _one_of(check: _Check, branches: Sequence[Any], instance: Any, schema: Any) -> bool:
    return sum(1 for branch in branches if check.valid(instance, branch)) == 1


def _unique_items(check: _Check, unique: Any, instance: Any, schema: Any) -> bool:
    if not unique or not isinstance(instance, list):
        return True
    if not all(isinstance(item, str) for item in instance):
        raise BeyondSubset("uniqueItems over values other than strings")
    return len(set(instance)) == len(instance)


_RULES: dict[str, Callable[[_Check, Any, Any, Any], bool]] = {
    "type": _type,
    "$ref": _ref,
    "properties": _properties,
    "patternProperties": _pattern_properties,
    "additionalProperties": _additional_properties,
    "required": _required,
    "items": _items,
    "enum": _enum,
    "const": _const,
    "minimum": _minimum,
    "maximum": _maximum,
    "minLength": _min_length,
    "maxLength": _max_length,
    "pattern": _pattern,
    "oneOf": _one_of,
    "uniqueItems": _unique_items,
}
