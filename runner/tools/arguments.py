"""Tool argument schemas: the JSON Schema offered to the model and the validation of calls.

Two implementations share one small protocol: :class:`PydanticArguments` (built from a
Python signature or from the typed ``parameters`` of a YAML tool; validates and coerces)
and :class:`JsonSchemaArguments` (a schema given by someone else, e.g. an MCP server).
Invalid arguments raise :class:`ArgumentsInvalid` listing every problem, so the registry
can tell the model exactly what to fix.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from runner.tools.docstrings import parse_docstring
from runner.untrusted_regex import bounded_validator, shared_deadline

_YAML_TYPES: dict[str, type] = {"string": str, "integer": int, "number": float, "boolean": bool}
_MAX_INPUT_REPR = 80
_FieldSpec = tuple[Any, Any, str | None]  # annotation, default (... = required), description


class ArgumentsInvalid(Exception):
    """The arguments of a call do not match the tool's schema. ``located`` holds each problem's
    place in the arguments (a path of keys and indexes) with its message."""

    def __init__(self, problems: list[str], located: list[tuple[tuple[Any, ...], str]] | None = None):
        self.problems = problems
        self.located = located if located is not None else [((), problem) for problem in problems]
        super().__init__("; ".join(problems))


class ArgumentSchema(Protocol):
    """Validates arguments against a JSON Schema offered to the model."""

    @property
    def json_schema(self) -> dict[str, Any]: ...

    def validate(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """Return the validated (possibly coerced) arguments or raise ArgumentsInvalid."""
        ...


@dataclass(frozen=True)
class PydanticArguments:
    """Arguments described by a pydantic model built at tool definition time."""

    model: type[BaseModel]
    json_schema: dict[str, Any]
    description: str
    field_names: Mapping[str, str]  # python parameter name -> model field name

    @classmethod
    def from_function(cls, fn: Callable[..., Any], skip: Iterable[str] = ()) -> PydanticArguments:
        """Derive the schema from ``fn``'s signature and docstring (``skip``: not offered)."""
        signature = inspect.signature(fn)
        hints = typing.get_type_hints(fn, include_extras=True)
        doc = parse_docstring(fn.__doc__)
        fields: dict[str, _FieldSpec] = {}
        for param in signature.parameters.values():
            if param.name in skip:
                continue
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD, param.POSITIONAL_ONLY):
                raise TypeError(f"{fn.__qualname__}: tool parameters must be named ({param})")
            default = ... if param.default is param.empty else param.default
            annotation = hints.get(param.name, Any)
            fields[param.name] = (annotation, default, doc.params.get(param.name))
        return cls._build(fn.__name__, fields, doc.description)

    @classmethod
    def from_parameters(
        cls, tool_name: str, parameters: Mapping[str, Mapping[str, Any]], description: str = ""
    ) -> PydanticArguments:
        """Build the schema from YAML ``parameters``: name -> {type, description, enum, default}."""
        fields: dict[str, _FieldSpec] = {}
        for name, spec in parameters.items():
            annotation: Any = _YAML_TYPES[spec.get("type", "string")]
            if "enum" in spec:
                annotation = Literal[tuple(spec["enum"])]
            default = spec.get("default", ...)
            fields[name] = (annotation, default, spec.get("description"))
        return cls._build(tool_name, fields, description)

    @classmethod
    def _build(cls, name: str, fields: dict[str, _FieldSpec], description: str) -> PydanticArguments:
        model_fields: dict[str, Any] = {}
        field_names: dict[str, str] = {}
        for param, (annotation, default, text) in fields.items():
            internal = param if _safe_field_name(param) else f"field_{len(field_names)}"
            alias = param if internal != param else None
            model_fields[internal] = (annotation, Field(default, description=text, alias=alias))
            field_names[param] = internal
        config = ConfigDict(extra="forbid", protected_namespaces=(), populate_by_name=False)
        model = create_model(f"{name}_arguments", __config__=config, **model_fields)
        schema = _without_titles(model.model_json_schema(by_alias=True))
        return cls(model=model, json_schema=schema, description=description, field_names=field_names)

    def validate(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """Validate and coerce; keep nested models as model instances."""
        try:
            instance = self.model.model_validate(arguments)
        except ValidationError as error:
            errors = error.errors()
            raise ArgumentsInvalid([_describe(e) for e in errors], [(tuple(e["loc"]), _message(e)) for e in errors]) from None
        return {param: getattr(instance, internal) for param, internal in self.field_names.items()}


@dataclass(frozen=True)
class JsonSchemaArguments:
    """Arguments described by a JSON Schema we did not write (validated with jsonschema)."""

    json_schema: dict[str, Any]

    def validate(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """Check ``arguments`` against the schema; return them unchanged."""
        from referencing import Registry
        from referencing.exceptions import Unresolvable

        # the schema is the server's and the arguments the model's: patterns matched with a time limit,
        # and an empty registry: a $ref to a URL is refused, never fetched (169.254.169.254 is a URL)
        validator = self._validator_class()(self.json_schema, registry=Registry())
        located: list[tuple[tuple[Any, ...], str]] | None = None
        try:
            with shared_deadline():
                errors = sorted(validator.iter_errors(arguments), key=lambda e: list(e.path))
                located = [(tuple(error.absolute_path), error.message) for error in errors]
                problems = [f"{_pointer(path)}: {message}" for path, message in located]
        except Unresolvable as exc:
            problems = [f"the tool's schema refers to {getattr(exc, 'ref', '')!r}, which runner does not fetch"]
        except RecursionError:  # the server's $ref cycle, or arguments nested deeper than Python recurses
            problems = ["the tool's schema or these arguments nest too deeply to validate"]
        if problems:
            raise ArgumentsInvalid(problems, located)
        return arguments

    def schema_problem(self) -> str | None:
        """Why the schema itself is not valid for its draft (an unknown type, a ``minLength``
        that is not a number...), or ``None``: such a schema fails every call, so its tool is refused."""
        from jsonschema.exceptions import SchemaError

        try:
            self._validator_class().check_schema(self.json_schema)
        except SchemaError as exc:
            return f"{exc.message} (at {_pointer(exc.absolute_path) or '/'})"
        except RecursionError:
            return "it nests too deeply"
        return None

    def _validator_class(self) -> Any:
        import jsonschema  # only MCP tools need it

        return bounded_validator(jsonschema.validators.validator_for(self.json_schema))


def _safe_field_name(name: str) -> bool:
    return not (name.startswith(("_", "model_")) or hasattr(BaseModel, name))


def _without_titles(schema: dict[str, Any]) -> dict[str, Any]:
    """Drop pydantic's generated titles (noise for the model), keeping property names."""
    schema = {k: v for k, v in schema.items() if k != "title"}
    if "properties" in schema:
        schema["properties"] = {
            name: {k: v for k, v in prop.items() if k != "title"} for name, prop in schema["properties"].items()
        }
    if "$defs" in schema:
        schema["$defs"] = {name: _without_titles(d) for name, d in schema["$defs"].items()}
    return schema


def _describe(error: Any) -> str:
    return f"{_pointer(error['loc'])}: {_message(error)}"


def _message(error: Any) -> str:
    """Pydantic's message with the value it refused (``Input should be '==', ... (got '=>')``)."""
    message = error["msg"]
    if error["type"] in ("missing", "extra_forbidden"):
        return str(message)
    shown = repr(error.get("input"))
    if len(shown) > _MAX_INPUT_REPR:
        shown = shown[: _MAX_INPUT_REPR - 3] + "..."
    return f"{message} (got {shown})"


def _pointer(path: Iterable[Any]) -> str:
    return "/" + "/".join(str(p) for p in path)
