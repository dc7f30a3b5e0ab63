"""DAG params for the batch options: one :class:`~airflow.sdk.Param` per option the operators take,
made from :data:`runner.batch.options.BATCH_OPTIONS` (its default, type, bounds and help), so a
DAG that passes its params on as ``options`` cannot drift from them (the fan-out example DAG)."""

from __future__ import annotations

from typing import Any

from airflow.sdk import Param

from runner.airflow.options import OPTION_NAMES
from runner.batch.options import OPTIONS, BatchOption


def batch_option_params() -> dict[str, Param]:
    """``{name: Param}`` for every option of :data:`runner.airflow.options.OPTION_NAMES`, in the table's order."""
    return {name: Param(_default(OPTIONS[name]), description=OPTIONS[name].help, **param_schema(OPTIONS[name]))
            for name in OPTION_NAMES}  # fmt: skip


def batch_option_templates() -> dict[str, str]:
    """``{name: "{{ params.<name> }}"}`` for every option :func:`batch_option_params` makes."""
    return {name: "{{ params." + name + " }}" for name in OPTION_NAMES}


def param_schema(option: BatchOption) -> dict[str, Any]:
    """The JSON Schema keywords of ``option``'s param (``null``: not given)."""
    kind = option.kind
    if kind == "flag":
        return {"type": "boolean"}
    if kind == "list":
        items = {"type": "string"} if option.item_pattern is None else {"type": "string", "pattern": option.item_pattern}
        return {"type": "array", "items": items}
    if kind == "caps":
        return {"type": ["null", "object"]}
    if kind == "choice":
        return {"type": ["null", "string"], "enum": [None, *option.choices]}
    if kind in ("text", "model"):
        return {"type": ["null", "string"]}
    integer = kind == "integer" or (kind == "cap" and option.cap in ("max_steps", "max_tool_calls", "max_tokens"))
    schema: dict[str, Any] = {"type": ["null", "integer" if integer else "number"]}
    if option.positive:
        schema["exclusiveMinimum"] = 0
    elif option.minimum is not None or kind == "cap":
        schema["minimum"] = option.minimum if option.minimum is not None else 0
    if option.maximum is not None:
        schema["maximum"] = option.maximum
    return schema


def _default(option: BatchOption) -> Any:
    if option.kind == "list":
        return list(option.default or ())
    if option.kind == "flag":
        return bool(option.default)
    return option.default
