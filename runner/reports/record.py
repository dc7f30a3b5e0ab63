"""The run record: the one data structure every report is rendered from.

The record is a plain JSON-able dict produced by the run machinery; its shape is defined
by ``report.schema.json`` (package data, ``runner.report/v1``). This module validates a
record against that schema plus the cross references a schema cannot express, and fills
in the usage rollups (by agent, model, step, total) from the steps when they are absent.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from datetime import datetime
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jsonschema import Draft202012Validator, ValidationError

SCHEMA_VERSION = "runner.report/v1"
USAGE_KEYS = (
    "input_tokens",
    "output_tokens",
    "cached_input_tokens",
    "total_tokens",
    "cost_usd",
    "model_calls",
    "tool_calls",
    "reasoning_tokens",
    "cache_write_tokens",
)


@cache
def report_schema() -> dict[str, Any]:
    """The JSON Schema (Draft 2020-12) of a run record, as a dict."""
    text = resources.files("runner.reports").joinpath("report.schema.json").read_text("utf-8")
    loaded: dict[str, Any] = json.loads(text)
    return loaded


def validate_record(record: Mapping[str, Any]) -> None:
    """Check ``record`` against the schema and its cross references.

    Raises :class:`ValueError` whose message lists every problem, one per line, as
    ``/json/pointer: message`` (jsonschema's wording for the schema's problems).
    """
    problems = _schema_problems(record)
    if not problems:
        problems = _cross_reference_problems(record)
    if problems:
        raise ValueError(f"invalid run record ({len(problems)} problem(s)):\n" + "\n".join(problems))


def _schema_problems(record: Mapping[str, Any]) -> list[str]:
    errors = record_validator().iter_errors(record)
    return [f"{_pointer(error.absolute_path)}: {error.message}" for error in sorted(errors, key=_error_order)]


@cache
def record_validator() -> Draft202012Validator:
    """jsonschema's Draft 2020-12 validator for ``report.schema.json``, built once per process.

    Without a format checker, so ``format`` is an annotation (timestamps are held to the
    schema's ``pattern``). jsonschema is imported here, not with this module: a batch reads
    this module for the usage rollups and never validates a record."""
    from jsonschema import Draft202012Validator

    return Draft202012Validator(report_schema())


def _error_order(error: ValidationError) -> list[str]:
    return [str(part) for part in error.absolute_path]


def step_usage(step: Mapping[str, Any]) -> dict[str, Any]:
    """The usage of one step in rollup shape (with ``total_tokens`` and ``tool_calls``)."""
    usage = step.get("usage") or {}
    rollup = {key: usage.get(key, 0) for key in USAGE_KEYS}
    rollup["total_tokens"] = rollup["input_tokens"] + rollup["output_tokens"]
    rollup["tool_calls"] = len(step.get("tool_calls") or [])
    return rollup


def usage_rollups(steps: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Usage summed over ``steps``: ``total``, ``by_agent``, ``by_model`` and ``by_step``.

    Steps without an agent (tool steps) or model count in ``total`` and ``by_step`` only.
    """
    rollups: dict[str, Any] = {"total": _zero(), "by_agent": {}, "by_model": {}, "by_step": {}}
    for step in steps:
        usage = step_usage(step)
        _add(rollups["total"], usage)
        _add(rollups["by_step"].setdefault(step["id"], _zero()), usage)
        if step.get("agent"):
            _add(rollups["by_agent"].setdefault(step["agent"], _zero()), usage)
        if step.get("model"):
            _add(rollups["by_model"].setdefault(step["model"], _zero()), usage)
    return rollups


def call_rollups(rollups: dict[str, Any], calls: Iterable[Mapping[str, Any]], step_ids: Iterable[str]) -> dict[str, Any]:
    """``rollups`` (from the steps) with ``by_agent`` and ``by_model`` recomputed from the run's
    model calls (a judge's calls under the judge agent and its model, embeddings under their
    knowledge base), and calls outside every step (building a knowledge base) added to ``total``."""
    in_steps = set(step_ids)
    out = {**rollups, "by_agent": {}, "by_model": {}, "total": dict(rollups["total"])}
    for call in calls:
        usage = {key: call.get(key, 0) or 0 for key in USAGE_KEYS if key not in ("model_calls", "tool_calls")}
        usage["total_tokens"] = usage["input_tokens"] + usage["output_tokens"]
        usage["model_calls"], usage["tool_calls"] = 1, 0
        _add(out["by_agent"].setdefault(call["agent"], _zero()), usage)
        _add(out["by_model"].setdefault(call["model"], _zero()), usage)
        if call.get("step_id") not in in_steps:
            _add(out["total"], {**usage, "model_calls": 0})
    for agent, step_usage in rollups["by_agent"].items():  # tool calls belong to the steps' agents
        out["by_agent"].setdefault(agent, _zero())["tool_calls"] = step_usage["tool_calls"]
    return out


def fill_usage_rollups(record: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``record`` whose ``usage`` has every rollup; present ones are kept as given."""
    computed = usage_rollups(record.get("steps") or [])
    given = dict(record.get("usage") or {})
    return {**record, "usage": {key: given.get(key, value) for key, value in computed.items()}}


def finite_json(value: Any) -> Any:
    """A copy of ``value`` with NaN and infinities (which JSON cannot hold) replaced by None.

    Tool data often comes from pandas, where a missing cell is NaN.
    """
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {key: finite_json(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [finite_json(item) for item in value]
    return value


def _zero() -> dict[str, Any]:
    return {key: 0.0 if key == "cost_usd" else 0 for key in USAGE_KEYS}


def _add(into: dict[str, Any], usage: Mapping[str, Any]) -> None:
    for key in USAGE_KEYS:
        into[key] += usage[key]
    into["cost_usd"] = round(into["cost_usd"], 10)


def _pointer(path: Iterable[Any]) -> str:
    return "/" + "/".join(str(part).replace("~", "~0").replace("/", "~1") for part in path)


def _cross_reference_problems(record: Mapping[str, Any]) -> list[str]:
    """Problems the schema cannot see: unknown step ids, ragged tables, inconsistent status."""
    problems: list[str] = []
    step_ids = [step["id"] for step in record["steps"]]
    for index, step_id in enumerate(step_ids):
        if step_ids.index(step_id) != index:
            problems.append(f"/steps/{index}/id: duplicate step id {step_id!r}")
    for step_id, table in (record.get("tables") or {}).items():
        if step_id not in step_ids:
            problems.append(f"/tables/{step_id}: no step has the id {step_id!r}")
        width = len(table["columns"])
        problems += [
            f"/tables/{step_id}/rows/{n}: {len(row)} cells for {width} columns"
            for n, row in enumerate(table["rows"])
            if len(row) != width
        ]
    for index, artifact in enumerate(record.get("artifacts") or []):
        if artifact.get("step") is not None and artifact["step"] not in step_ids:
            problems.append(f"/artifacts/{index}/step: no step has the id {artifact['step']!r}")
    problems += _plan_problems(record)
    problems += _status_problems(record)
    return problems


def _plan_problems(record: Mapping[str, Any]) -> list[str]:
    plans = [("/plan", record.get("plan"))]
    plans += [(f"/replans/{n}/plan", replan["plan"]) for n, replan in enumerate(record.get("replans") or [])]
    problems = []
    for where, plan in plans:
        if not plan:
            continue
        ids = {step["id"] for step in plan["steps"]}
        for index, step in enumerate(plan["steps"]):
            problems += [
                f"{where}/steps/{index}/depends_on: no plan step has the id {dep!r}"
                for dep in step.get("depends_on", [])
                if dep not in ids
            ]
    return problems


def _status_problems(record: Mapping[str, Any]) -> list[str]:
    problems = []
    completed = record["status"] == "completed"
    if completed != (record["exit_code"] == 0):
        problems.append(
            f"/exit_code: {record['exit_code']} does not match status {record['status']!r} (0 means completed)"
        )
    if datetime.fromisoformat(record["finished_at"]) < datetime.fromisoformat(record["started_at"]):
        problems.append(f"/finished_at: {record['finished_at']} is before started_at {record['started_at']}")
    return problems
