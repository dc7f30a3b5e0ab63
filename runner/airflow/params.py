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
    if kind == "cap":
        return _cap_schema(option)
    schema: dict[str, Any] = {"type": ["null", "integer" if kind == "integer" else "number"]}
    if option.positive:
        schema["exclusiveMinimum"] = 0
    elif option.minimum is not None:
        schema["minimum"] = option.minimum
    if option.maximum is not None:
        schema["maximum"] = option.maximum
    return schema


def _cap_schema(option: BatchOption) -> dict[str, Any]:
    """A cap's param: the bounds the caps schema gives the cap it sets (what the task would refuse)."""
    from runner.config.capvalues import cap_bounds

    assert option.cap is not None
    bounds = cap_bounds(option.cap)
    schema: dict[str, Any] = {"type": ["null", "integer" if bounds.integer else "number"]}
    schema["exclusiveMinimum" if bounds.exclusive_minimum else "minimum"] = bounds.minimum
    if bounds.maximum is not None:
        schema["maximum"] = bounds.maximum
    return schema


def _default(option: BatchOption) -> Any:
    if option.kind == "list":
        return list(option.default or ())
    if option.kind == "flag":
        return bool(option.default)
    return option.default
