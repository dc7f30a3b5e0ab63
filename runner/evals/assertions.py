"""Checking one case's result against its assertions.

A value is found by a dotted ``path`` into the output (a text output is parsed as JSON
first); an expected value comes from the YAML or from the case's dataset column (an empty
cell means the assertion does not apply to that case). Unless a case asserts a ``status``,
its run must have completed.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from runner import untrusted_json, untrusted_regex
from runner.config.evals import LIST_INDEX, VALUE_KINDS, Assertion
from runner.config.schema import validate_value

_MISSING = object()


@dataclass(frozen=True)
class CaseRun:
    """How one case's run went: its status (``completed``, ``failed``, ``capped``, ``stuck``,
    or ``not_run`` / ``invalid`` for a row the batch did not run), its output and what it cost."""

    status: str
    output: Any = None
    cost_usd: float = 0.0
    latency_seconds: float | None = None
    error: str | None = None


@dataclass(frozen=True)
class CheckResult:
    """One assertion on one case: passed, failed (``detail`` says why) or ``None``: not applicable."""

    label: str
    passed: bool | None
    detail: str = ""


def check_case(assertions: Iterable[Assertion], run: CaseRun, values: Mapping[str, Any]) -> list[CheckResult]:
    """Every assertion's result for one case (the implicit "completed" check first)."""
    assertions = list(assertions)
    results = []
    if not any(a.kind == "status" for a in assertions):
        results.append(CheckResult("completed", run.status == "completed", "" if run.status == "completed" else _why(run)))
    results += [_checked(a, run, values) for a in assertions]
    return results


def check(assertion: Assertion, run: CaseRun, values: Mapping[str, Any]) -> CheckResult:
    label = assertion.label
    expected = assertion.expected.value
    if assertion.expected.column is not None:
        expected = values.get(assertion.expected.column)
        if expected is None or expected == "":
            return CheckResult(label, None, f"column {assertion.expected.column!r} is empty for this case")
    if assertion.kind in VALUE_KINDS:
        if run.status != "completed":
            return CheckResult(label, False, f"no answer: {_why(run)}")
        value = value_at(run.output, assertion.path)
        if value is _MISSING:
            return CheckResult(label, False, f"the output has no {assertion.path!r}")
        return _check_value(assertion, value, expected)
    return _check_run(assertion, run, expected)


def _checked(assertion: Assertion, run: CaseRun, values: Mapping[str, Any]) -> CheckResult:
    """:func:`check`, with a check that cannot be made a failed result naming why: every case
    was paid for, and one assertion must not cost the eval report."""
    try:
        return check(assertion, run, values)
    except Exception as error:  # an assertion over outside data: its failure is a result, not a lost report
        return CheckResult(assertion.label, False, f"could not be checked: {type(error).__name__}: {str(error)[:200]}")


def value_at(output: Any, path: str | None) -> Any:
    """The value at a dotted ``path`` (``items.0.name``) in ``output``; text is parsed as JSON
    when a path is given. ``_MISSING`` when there is no such value."""
    if path is None:
        return output
    value = _parsed(output)
    for part in path.split("."):
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and LIST_INDEX.fullmatch(part) and -len(value) <= int(part) < len(value):
            value = value[int(part)]
        else:
            return _MISSING
    return value


def _check_value(assertion: Assertion, value: Any, expected: Any) -> CheckResult:
    label, fold = assertion.label, assertion.ignore_case
    if assertion.kind == "equals":
        return _result(label, same(value, expected, ignore_case=fold), f"got {_show(value)}, expected {_show(expected)}")
    if assertion.kind == "contains":
        text, part = _text(value), str(expected)
        found = part.casefold() in text.casefold() if fold else part in text
        return _result(label, found, f"{_show(part)} not in {_show(text)}")
    if assertion.kind == "regex":
        try:
            found = untrusted_regex.search(str(expected), _text(value), ignore_case=fold)
        except ValueError as exc:  # too slow on this output, or (from a dataset cell) not a pattern
            return CheckResult(label, False, str(exc))
        return _result(label, found, f"{_show(_text(value))} does not match {expected!r}")
    if assertion.kind == "json_schema":
        problems = validate_value(_parsed(value), expected)
        return _result(label, not problems, "; ".join(problems[:3]))
    return _approx(assertion, value, expected)


def _check_run(assertion: Assertion, run: CaseRun, expected: Any) -> CheckResult:
    label = assertion.label
    if assertion.kind == "status":
        return _result(label, run.status == expected, f"the run {run.status}, expected {expected}")
    limit = _number(expected)  # from a dataset column it may be anything
    if limit is None:
        return CheckResult(label, False, f"the expected value {_show(expected)} is not a finite number")
    if assertion.kind == "max_cost_usd":
        return _result(label, run.cost_usd <= limit, f"cost ${run.cost_usd:.6f} > ${limit:.6f}")
    took = run.latency_seconds
    return _result(label, took is not None and took <= limit, f"took {'?' if took is None else f'{took:.2f}'} s > {limit:g} s")


def _approx(assertion: Assertion, value: Any, expected: Any) -> CheckResult:
    actual, wanted = _number(value), _number(expected)
    if actual is None:
        return CheckResult(assertion.label, False, f"got {_show(value)}, not a number")
    if wanted is None:
        return CheckResult(assertion.label, False, f"the expected value {_show(expected)} is not a number")
    allowed = max(assertion.tolerance, assertion.rel_tolerance * abs(wanted))
    slack = 1e-9 * max(1.0, abs(wanted))  # 3.5 - 3.4 is 0.10000000000000009 in binary floating point
    return _result(assertion.label, abs(actual - wanted) <= allowed + slack, f"got {actual:g}, expected {wanted:g} ± {allowed:g}")


def same(actual: Any, expected: Any, *, ignore_case: bool = False) -> bool:
    """Equality as a person means it: numbers by value, a dataset cell's text as JSON when the
    output is not text (``"3"`` equals ``3``, ``"true"`` equals ``True``)."""
    if isinstance(expected, str) and not isinstance(actual, str):
        try:
            expected = untrusted_json.loads(expected)
        except ValueError:
            return False
    if isinstance(actual, str) and isinstance(expected, str):
        return actual.casefold() == expected.casefold() if ignore_case else actual == expected
    if isinstance(actual, bool) or isinstance(expected, bool):
        return actual is expected
    if isinstance(actual, int | float) and isinstance(expected, int | float):
        return float(actual) == float(expected)
    return bool(actual == expected)


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, str):
        try:
            number = float(value.strip().replace(",", ""))
        except ValueError:
            return None
        return number if math.isfinite(number) else None
    return None


def _parsed(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return untrusted_json.loads(value)
        except ValueError:
            return value
    return value


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)


def _show(value: Any, limit: int = 80) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _result(label: str, passed: bool, why: str) -> CheckResult:
    return CheckResult(label, passed, "" if passed else why)


def _why(run: CaseRun) -> str:
    return f"the run {run.status}" + (f": {run.error[:200]}" if run.error else "")
