"""Resolving a run's inputs: given values coerced to their declared types, defaults filled in."""

from __future__ import annotations

import difflib
from datetime import date, timedelta
from typing import Any

from runner.config.specs import InputSpec, TaskSpec
from runner.errors import InputError


def default_value(spec: InputSpec, today: date) -> Any:
    """The default of ``spec``, with ``today`` / ``yesterday`` resolved for dates."""
    if spec.type == "date" and spec.default == "today":
        return today.isoformat()
    if spec.type == "date" and spec.default == "yesterday":
        return (today - timedelta(days=1)).isoformat()
    return spec.default


def resolve_inputs(task: TaskSpec, raw: dict[str, Any], today: date) -> dict[str, Any]:
    """Typed inputs for one run; raises :class:`InputError` naming the input and the fix."""
    from runner.batch.coerce import coerce_input

    declared = {spec.name: spec for spec in task.inputs}
    for name in raw:
        if name not in declared:
            close = difflib.get_close_matches(name, list(declared), n=1)
            hint = f" Did you mean '{close[0]}'?" if close else ""
            names = ", ".join(declared) or "none"
            raise InputError(f"task '{task.name}' has no input '{name}'.{hint} Declared inputs: {names}")
    values: dict[str, Any] = {}
    for name, spec in declared.items():
        if name in raw and raw[name] is not None:
            values[name] = coerce_input(spec, raw[name], source="--input")
        elif spec.has_default:
            values[name] = default_value(spec, today)
        elif spec.required:
            raise InputError(f"task '{task.name}' needs input '{name}' ({spec.type}); give it with --input {name}=VALUE")
        else:
            values[name] = None
    return values
