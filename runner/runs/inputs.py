"""Resolving a run's inputs: the same coercion as a batch row, so ``runner run --input``
and ``runner batch`` accept and refuse exactly the same values."""

from __future__ import annotations

from datetime import date
from typing import Any

from runner.config.specs import TaskSpec


def resolve_inputs(task: TaskSpec, raw: dict[str, Any], today: date) -> dict[str, Any]:
    """Typed inputs for one run, defaults filled in; :class:`~runner.errors.InputError` names
    every bad or missing input at once."""
    from runner.batch.coerce import coerce_inputs

    return coerce_inputs(task.inputs, raw, source=f"task '{task.name}'", today=today)
