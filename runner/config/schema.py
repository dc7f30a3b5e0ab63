"""The JSON Schemas of the configuration language, and validation against them.

The schemas in ``runner/config/schemas/`` are the only definition of the language:
nothing else lists the allowed keys. This module loads them (package data), validates a
:class:`~runner.config.documents.Document` and turns each jsonschema error into a located
:class:`~runner.errors.Problem`. ``jsonschema`` is imported when something is first
validated, not with this module: a run of an unchanged project (see
:mod:`runner.config.compiled`) whose agents declare no output schema never needs it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from runner.config.documents import Document, escape_pointer_token
from runner.errors import Problem, did_you_mean
from runner.untrusted_regex import bounded_validator, ecma_ends, shared_deadline

if TYPE_CHECKING:
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import ValidationError
    from referencing import Registry

KINDS = {
    "Agent": "agent", "Task": "task", "Tool": "tool", "Prices": "prices", "Telemetry": "telemetry", "Eval": "eval",
    "Knowledge": "knowledge", "Source": "source", "ModelProfiles": "profiles", "Budget": "budget",
}  # fmt: skip
SCHEMA_NAMES = (
    "common", "agent", "task", "tool", "prices", "plan", "telemetry", "eval", "knowledge", "source", "profiles", "budget",
)  # fmt: skip
BASE_URI = "https://runner.dev/schemas/v1/"


@cache
def schema(name: str) -> dict[str, Any]:
    """The schema ``name`` (e.g. ``"agent"``) as a dict."""
    text = resources.files("runner.config.schemas").joinpath(f"{name}.schema.json").read_text("utf-8")
    loaded: dict[str, Any] = json.loads(text)
    return loaded


def exported_schema(name: str) -> dict[str, Any]:
    """The schema ``name`` as ``runner schema --out`` writes it: without its ``$id``, so that its
    references to sibling schemas (``common.schema.json#/$defs/...``) resolve next to the file
    it is read from, by an editor or check-jsonschema, instead of at the ``$id``'s host."""
    return {key: value for key, value in schema(name).items() if key != "$id"}


@cache
def _registry() -> Registry:
    from referencing import Registry, Resource

    resources_ = [(BASE_URI + f"{n}.schema.json", Resource.from_contents(schema(n))) for n in SCHEMA_NAMES]
    return Registry().with_resources(resources_)  # type: ignore[no-any-return]


@cache
def validator(name: str) -> Draft202012Validator:
    """A validator for the schema ``name``, resolving references to sibling schemas."""
    return _ecma_validator()(schema(name), registry=_registry())  # type: ignore[no-any-return]


@cache
def _ecma_validator() -> Any:
    """Draft 2020-12 with ``pattern`` read as ECMA-262 reads it (``$`` is the end of the text,
    not also the place before a final newline): as editors and JSON Schema tools validate."""
    from jsonschema import Draft202012Validator, validators

    return validators.extend(Draft202012Validator, {"pattern": _ecma_pattern})


def _ecma_pattern(checker: Any, pattern: str, instance: Any, subschema: Any) -> Any:
    import re

    from jsonschema.exceptions import ValidationError

    if checker.is_type(instance, "string") and not re.search(ecma_ends(pattern), instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def validate_document(doc: Document) -> list[Problem]:
    """Validate one document against the schema of its ``kind``; return located problems."""
    data = doc.data
    if not isinstance(data, dict):
        return [doc.problem("", "a configuration document must be a mapping with apiVersion and kind")]
    kind = data.get("kind")
    if kind not in KINDS:
        hint = did_you_mean(str(kind), KINDS) if isinstance(kind, str) else ""
        return [doc.problem("/kind" if "kind" in data else "", f"kind must be one of {', '.join(KINDS)}{hint}")]
    errors = sorted(validator(KINDS[kind]).iter_errors(data), key=lambda e: list(e.absolute_path))
    problems: list[Problem] = []
    for error in errors:
        problems.extend(_to_problems(doc, error))
    return _dedupe(problems)


def validate_part(doc: Document, pointer: str, value: Any, json_schema: Mapping[str, Any]) -> list[Problem]:
    """Validate the part of ``doc`` at ``pointer`` against ``json_schema`` (e.g. a tool's
    settings against the settings that tool declares); located problems, as for documents."""
    errors = sorted(_ecma_validator()(json_schema).iter_errors(value), key=lambda e: list(e.absolute_path))
    return _dedupe([p for error in errors for p in _to_problems(doc, error, prefix=pointer)])


def validate_value(value: Any, json_schema: dict[str, Any]) -> list[str]:
    """Validate an arbitrary value (e.g. a model's output) against a user's schema. Its
    patterns are matched with a time limit (:mod:`runner.untrusted_regex`); a ``$ref`` that
    does not resolve is a problem, not an exception."""
    from jsonschema import Draft202012Validator
    from referencing import Registry
    from referencing.exceptions import Unresolvable

    checker = bounded_validator(Draft202012Validator)(json_schema, registry=Registry())  # empty: a URL $ref is never fetched
    try:
        with shared_deadline():
            return [f"{_pointer(e)}: {e.message}" for e in checker.iter_errors(value)]
    except Unresolvable as exc:
        return [f"the schema's reference {getattr(exc, 'ref', '')!r} cannot be resolved: only references inside it (#/$defs/...) are"]
    except RecursionError:  # a $ref cycle, or a value nested deeper than Python recurses
        return ["the schema or the value nests too deeply to validate (a $ref that leads back to itself?)"]


def check_schema(json_schema: Any) -> str | None:
    """``None`` if ``json_schema`` is a valid Draft 2020-12 schema whose references all point
    inside it (runner never fetches a schema), else the reason."""
    from jsonschema import Draft202012Validator

    try:
        Draft202012Validator.check_schema(json_schema)
    except Exception as exc:  # jsonschema raises SchemaError; keep the message only
        return str(getattr(exc, "message", exc))
    from runner.config.schema_hazards import pattern_problem, recursion_problem, typed_values_problem

    return (_reference_problem(json_schema, json_schema) or pattern_problem(json_schema) or typed_values_problem(json_schema)
            or recursion_problem(json_schema))  # fmt: skip


def _reference_problem(root: Any, node: Any) -> str | None:
    """The first ``$ref``/``$dynamicRef`` that leaves the schema or points at nothing."""
    if isinstance(node, list):
        return next((p for item in node if (p := _reference_problem(root, item)) is not None), None)
    if not isinstance(node, dict):
        return None
    for key in ("$ref", "$dynamicRef"):
        ref = node.get(key)
        if isinstance(ref, str) and not _resolves(root, ref):
            return f"{key} {ref!r} does not point inside this schema; write the definition under $defs and use '#/$defs/NAME'"
    return next((p for value in node.values() if (p := _reference_problem(root, value)) is not None), None)


def _resolves(root: Any, ref: str) -> bool:
    if not ref.startswith("#"):
        return False
    if not ref.startswith("#/") and ref != "#":
        return True  # a plain-name anchor (#name): jsonschema checks it when validating
    target = root
    for token in ref[2:].split("/") if ref != "#" else ():
        token = unquote(token).replace("~1", "/").replace("~0", "~")
        if isinstance(target, dict) and token in target:
            target = target[token]
        elif isinstance(target, list) and token.isdigit() and int(token) < len(target):
            target = target[int(token)]
        else:
            return False
    return True


def _pointer(error: ValidationError) -> str:
    return "".join(f"/{escape_pointer_token(p)}" for p in error.absolute_path)


def _to_problems(doc: Document, error: ValidationError, prefix: str = "") -> list[Problem]:
    if error.validator in ("oneOf", "anyOf") and error.context:
        # the branch of the value's own type (a mapping where a string or a mapping is allowed) says more
        from jsonschema.exceptions import best_match

        same_type = [e for e in error.context if not (e.validator == "type" and not e.relative_path)]
        error = best_match(same_type or error.context)
    pointer = prefix + _pointer(error)
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        allowed = _allowed_keys(error.schema)
        unknown = [k for k in error.instance if k not in allowed]
        return [
            doc.problem(
                f"{pointer}/{escape_pointer_token(k)}",
                f"unknown key '{k}'{did_you_mean(k, allowed) or _allowed_hint(allowed)}",
                key=True,
            )
            for k in unknown
        ]
    if error.validator == "required":
        return [doc.problem(pointer, f"{error.message}; add it")]
    if error.validator == "dependentRequired":
        return [doc.problem(pointer, f"{error.message}; give both or neither")]
    if error.validator == "const" and pointer == "/apiVersion":
        return [doc.problem(pointer, f"apiVersion must be 'runner/v1' (got {error.instance!r})")]
    difference = doc.source.yaml11.get(pointer)
    if difference is not None and error.validator in ("type", "enum", "const"):
        return [doc.problem(pointer, difference.explain(_yaml_reading(error.instance)))]
    if error.validator == "enum":
        hint = did_you_mean(str(error.instance), [str(v) for v in error.validator_value])
        return [doc.problem(pointer, f"{error.instance!r} is not one of {error.validator_value}{hint}")]
    if error.validator == "type" and isinstance(error.instance, bool) and error.validator_value in ("number", "integer"):
        return [doc.problem(pointer, f"{error.instance!r} is a boolean; write a number")]
    if error.validator == "type" and isinstance(error.instance, str) and error.validator_value in ("number", "integer"):
        return [doc.problem(pointer, f"{error.instance!r} is a string; write the {error.validator_value} without quotes")]
    if error.validator == "type" and error.validator_value == "string" and isinstance(error.instance, (bool, int, float)):
        kind = "a boolean" if isinstance(error.instance, bool) else "a number"
        written = str(error.instance).lower() if isinstance(error.instance, bool) else str(error.instance)
        return [doc.problem(pointer, f"{written} is {kind} here, not a string; quote it ('{written}') for text")]
    if error.validator == "pattern" and pointer.endswith("api_key_env"):
        # never echo the value: a literal key pasted here must not reach logs
        return [doc.problem(pointer, "not an environment variable name (value hidden in case it is a key); "
                            "give the NAME of the variable that holds the key, e.g. OPENAI_API_KEY")]
    if error.validator == "pattern" and pointer == "/traces/endpoint":  # may hold user:password: never echoed
        return [doc.problem(pointer, "not an http(s) URL with a host and no user info (value hidden in case it holds a "
                            "credential); give credentials in OTEL_EXPORTER_OTLP_HEADERS")]
    if error.validator == "pattern" and error.schema.get("description"):
        return [doc.problem(pointer, f"{error.instance!r} is not valid here: {error.schema['description']}")]
    return [doc.problem(pointer, error.message)]


def _yaml_reading(value: Any) -> str:
    """How YAML 1.2 read a value: ``a string``, ``the number 0.01``."""
    return "a string" if isinstance(value, str) else f"the number {value}"


def _allowed_keys(subschema: dict[str, Any]) -> list[str]:
    return list(subschema.get("properties", {}))


def _allowed_hint(allowed: list[str]) -> str:
    return f"; allowed keys: {', '.join(allowed)}" if allowed else ""


def _dedupe(problems: list[Problem]) -> list[Problem]:
    seen: set[tuple[int, int, str]] = set()
    out = []
    for p in problems:
        key = (p.line, p.column, p.message)
        if key not in seen:
            seen.add(key)
            out.append(p)
    return out
