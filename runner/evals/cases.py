"""What each case of the dataset expects: its values in the columns the assertions name, and
the extra assertions of its ``checks_column`` cell (a JSON list, checked like the YAML's)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from runner import untrusted_json
from runner.batch.readers import detect_format, read_records
from runner.config.eval_checks import assertion_problems
from runner.config.evals import Assertion, EvalSpec, assertion_kinds, parse_assertion
from runner.config.schema import BASE_URI, validator


@dataclass(frozen=True)
class CaseExpectations:
    """One dataset row: column values by name, its own assertions, or why they are unusable."""

    values: dict[str, Any] = field(default_factory=dict)
    assertions: tuple[Assertion, ...] = ()
    error: str | None = None


def columns_read(spec: EvalSpec) -> list[str]:
    """The columns the assertions and the per-case checks read."""
    named = [a.expected.column for a in spec.assertions if a.expected.column]
    if spec.dataset.checks_column:
        named.append(spec.dataset.checks_column)
    return list(dict.fromkeys(named))


def read_expectations(spec: EvalSpec) -> dict[int, CaseExpectations]:
    """Row number (1-based, as the batch numbers rows) -> what that case expects."""
    columns = columns_read(spec)
    if not columns:
        return {}
    fmt = detect_format(spec.dataset.path, spec.dataset.format)
    found: dict[int, CaseExpectations] = {}
    for record in read_records(spec.dataset.path, fmt, columns):
        if record.values is None:
            found[record.number] = CaseExpectations(error=record.error)
            continue
        found[record.number] = _expectations(spec, record.values)
    return found


def _expectations(spec: EvalSpec, values: dict[str, Any]) -> CaseExpectations:
    column = spec.dataset.checks_column
    cell = values.get(column) if column else None
    if cell in (None, ""):
        return CaseExpectations(values)
    try:
        return CaseExpectations(values, parse_case_checks(cell))
    except ValueError as exc:
        return CaseExpectations(values, error=f"column {column!r}: {exc}")


def parse_case_checks(cell: Any) -> tuple[Assertion, ...]:
    """The assertions in one ``checks_column`` cell: JSON text (or a list, from JSONL/Parquet)."""
    items = untrusted_json.loads(cell, parse_constant=_no_constant) if isinstance(cell, str) else cell
    untrusted_json.check_depth(items)
    if not _finite(items):
        raise ValueError("NaN and Infinity are not numbers an assertion can use; write a finite number")
    if isinstance(items, dict):
        items = [items]
    if not isinstance(items, list):
        raise ValueError("expected a JSON list of assertions, e.g. [{\"path\": \"category\", \"equals\": \"billing\"}]")
    shape = validator("eval").evolve(schema={"$ref": BASE_URI + "eval.schema.json#/$defs/assertion"})
    for i, item in enumerate(items):
        errors = sorted(shape.iter_errors(item), key=lambda e: list(e.absolute_path))
        if errors:
            where = "".join(f"/{p}" for p in errors[0].absolute_path)
            raise ValueError(f"assertion {i + 1}{where}: {errors[0].message}")
        problems = assertion_problems(item)
        if problems:
            raise ValueError(f"assertion {i + 1}{problems[0][0]}: {problems[0][1]}")
    return tuple(parse_assertion(item) for item in items if len(assertion_kinds(item)) == 1)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON; write a finite number")


def _finite(value: Any) -> bool:
    """Whether every number in ``value`` (already depth-checked) is finite."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    if isinstance(value, list | tuple):
        return all(_finite(v) for v in value)
    return True
