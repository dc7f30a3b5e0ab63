"""Request bodies checked against the ``anthropic`` package's own request types, for the
loopback Anthropic server (:mod:`runner.model.anthropic_server`): what the real API refuses, it refuses.

The SDK's types (``anthropic.types.MessageCreateParams``, the Message Batches' ``Request``)
are generated from Anthropic's API definition. pydantic's ``TypeAdapter`` checks required
fields and value types; TypedDicts accept unknown keys, so :func:`unknown_keys` also walks
the body against the types and reports every key the API does not define (the real API
answers 400 "Extra inputs are not permitted" to those). Without the ``anthropic`` package
(the ``anthropic`` extra) nothing is checked here.
"""

from __future__ import annotations

import collections.abc
import functools
import types
import typing
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

import typing_extensions

_WRAPPERS = {typing.Annotated, typing.Required, typing.NotRequired, typing_extensions.Required, typing_extensions.NotRequired,
             typing_extensions.ReadOnly}  # fmt: skip
_SEQUENCES = {list, tuple, collections.abc.Iterable, collections.abc.Sequence}


def _unwrap(tp: Any) -> Any:
    while get_origin(tp) in _WRAPPERS:
        tp = get_args(tp)[0]
    return tp


def _literals(tp: Any) -> set[Any]:
    tp = _unwrap(tp)
    return set(get_args(tp)) if get_origin(tp) is Literal else set()


def _fits(value: Any, tp: Any) -> bool:
    """Whether ``value`` could be a ``tp`` (a TypedDict is told by its ``type`` literal)."""
    tp = _unwrap(tp)
    if typing_extensions.is_typeddict(tp):
        if not isinstance(value, dict):
            return False
        tag = _literals(get_type_hints(tp, include_extras=True).get("type"))
        return not tag or value.get("type") in tag
    origin = get_origin(tp) or tp
    if origin in _SEQUENCES:
        return isinstance(value, (list, tuple))
    if origin is Literal:
        return value in get_args(tp)
    if isinstance(origin, type):
        return isinstance(value, origin)
    return True


def unknown_keys(value: Any, tp: Any, path: str = "") -> list[str]:
    """The JSON pointers of keys in ``value`` that ``tp`` does not define."""
    tp = _unwrap(tp)
    if typing_extensions.is_typeddict(tp) and isinstance(value, dict):
        hints = get_type_hints(tp, include_extras=True)
        found = [f"{path}/{key}" for key in value if key not in hints]
        for key, item in value.items():
            if key in hints:
                found += unknown_keys(item, hints[key], f"{path}/{key}")
        return found
    origin = get_origin(tp)
    if origin in (Union, types.UnionType):
        options = [unknown_keys(value, arg, path) for arg in get_args(tp) if _fits(value, arg)]
        return min(options, key=len) if options else []
    if origin in _SEQUENCES and isinstance(value, (list, tuple)) and get_args(tp):
        return [key for index, item in enumerate(value) for key in unknown_keys(item, get_args(tp)[0], f"{path}/{index}")]
    if origin in (dict, collections.abc.Mapping) and isinstance(value, dict) and len(get_args(tp)) == 2:
        return [key for name, item in value.items() for key in unknown_keys(item, get_args(tp)[1], f"{path}/{name}")]
    return []



@functools.cache
def _adapters() -> tuple[Any, Any, Any, Any] | None:
    """The Messages body's and a batch request's types with their pydantic adapters, built once
    (``None`` without the ``anthropic`` package)."""
    try:
        from anthropic.types.message_create_params import MessageCreateParamsNonStreaming
        from anthropic.types.messages.batch_create_params import Request
    except ImportError:
        return None
    from pydantic import TypeAdapter

    return MessageCreateParamsNonStreaming, TypeAdapter(MessageCreateParamsNonStreaming), Request, TypeAdapter(Request)


def messages_problem(body: dict[str, Any]) -> str | None:
    """Why ``body`` is not a ``POST /v1/messages`` body by the SDK's own types (``None``: it is,
    or the package is not installed)."""
    return _problem(body, batch=False)


def batch_request_problem(request: dict[str, Any]) -> str | None:
    """Why ``request`` is not a Message Batches request (``{custom_id, params}``) by the SDK's types."""
    return _problem(request, batch=True)


def _problem(value: dict[str, Any], *, batch: bool) -> str | None:
    from pydantic import ValidationError

    found = _adapters()
    if found is None:
        return None
    body_type, body_adapter, request_type, request_adapter = found
    tp, adapter = (request_type, request_adapter) if batch else (body_type, body_adapter)
    try:
        adapter.validate_python(value)
    except ValidationError as exc:
        first = exc.errors()[0]
        return f"{'.'.join(str(part) for part in first['loc'])}: {first['msg']}"
    extra = unknown_keys(value, tp)
    return f"{extra[0].lstrip('/').replace('/', '.')}: Extra inputs are not permitted" if extra else None
