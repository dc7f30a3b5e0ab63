"""An eval's results: per case, per variant (pass rate, cost, latency, against its threshold),
and each variant against the stored baseline's variant of the same name.

:meth:`EvalResult.as_dict` is the JSON report and the baseline format
(``runner eval --save-baseline``); a baseline is read back as that JSON.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from runner.config.specs import CAP_NAMES
from runner.errors import EXIT_CAPPED, EXIT_FAILED, EXIT_OK
from runner.evals.assertions import CheckResult

FORMAT_VERSION = 1


@dataclass(frozen=True)
class CaseResult:
    """One case of one variant."""

    row: int
    id: str | None
    status: str
    passed: bool
    checks: tuple[CheckResult, ...]
    output: Any = None
    cost_usd: float = 0.0
    latency_seconds: float | None = None
    run_id: str | None = None
    error: str | None = None

    @property
    def key(self) -> str:
        """How a case is matched across variants and baselines: its id, else its row."""
        return self.id if self.id is not None else f"row {self.row}"

    @property
    def failed(self) -> list[CheckResult]:
        return [c for c in self.checks if c.passed is False]

    def as_dict(self) -> dict[str, Any]:
        return {
            "row": self.row, "id": self.id, "key": self.key, "status": self.status, "passed": self.passed,
            "output": self.output, "cost_usd": round(self.cost_usd, 8), "latency_seconds": self.latency_seconds,
            "run_id": self.run_id, "error": self.error,
            "checks": [{"label": c.label, "passed": c.passed, "detail": c.detail} for c in self.checks],
        }


@dataclass(frozen=True)
class VariantResult:
    """One variant over every case."""

    name: str
    cases: tuple[CaseResult, ...]
    threshold: float | None = None
    description: str = ""
    changes: dict[str, Any] = field(default_factory=dict)
    stop_reason: str | None = None
    stop_kind: str | None = None
    output_path: str | None = None
    batch_report: str | None = None

    @property
    def passed(self) -> int:
        return sum(1 for c in self.cases if c.passed)

    @property
    def pass_rate(self) -> float | None:
        return self.passed / len(self.cases) if self.cases else None

    @property
    def below_threshold(self) -> bool:
        """Under the declared threshold (an eval with no cases is below any threshold)."""
        if self.threshold is None:
            return False
        return self.pass_rate is None or self.pass_rate < self.threshold

    @property
    def capped(self) -> bool:
        return self.stop_kind in CAP_NAMES

    @property
    def cost_usd(self) -> float:
        return sum(c.cost_usd for c in self.cases)

    @property
    def cost_per_case(self) -> float | None:
        return self.cost_usd / len(self.cases) if self.cases else None

    def latency(self, pct: int) -> float | None:
        """Median (50) or another nearest-rank percentile of the cases' run latencies."""
        took = sorted(c.latency_seconds for c in self.cases if c.latency_seconds is not None)
        if not took:
            return None
        if pct == 50:
            return statistics.median(took)
        return took[max(-(-pct * len(took) // 100) - 1, 0)]

    def check_rates(self) -> dict[str, tuple[int, int]]:
        """Assertion label -> (cases passing it, cases it applied to)."""
        passed: Counter[str] = Counter()
        applied: Counter[str] = Counter()
        for case in self.cases:
            for check in case.checks:
                if check.passed is not None:
                    applied[check.label] += 1
                    passed[check.label] += int(check.passed)
        return {label: (passed[label], applied[label]) for label in applied}

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "description": self.description, "changes": self.changes, "threshold": self.threshold,
            "cases": len(self.cases), "passed": self.passed,
            "pass_rate": round(self.pass_rate, 6) if self.pass_rate is not None else None,
            "below_threshold": self.below_threshold, "cost_usd": round(self.cost_usd, 8),
            "cost_per_case": round(self.cost_per_case, 8) if self.cost_per_case is not None else None,
            "latency_median": self.latency(50), "latency_p95": self.latency(95),
            "checks": {label: {"passed": p, "applied": n} for label, (p, n) in self.check_rates().items()},
            "stop_reason": self.stop_reason, "stop_kind": self.stop_kind,
            "output_path": self.output_path, "batch_report": self.batch_report,
            "results": [c.as_dict() for c in self.cases],
        }


@dataclass(frozen=True)
class Comparison:
    """A variant against the baseline's variant of the same name."""

    variant: str
    pass_rate: float | None
    baseline_pass_rate: float | None
    cost_per_case: float | None
    baseline_cost_per_case: float | None
    latency_p95: float | None
    baseline_latency_p95: float | None
    regressions: tuple[str, ...]  # cases that passed in the baseline and fail now
    fixes: tuple[str, ...]  # cases that failed in the baseline and pass now

    def as_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in self.__dict__.items()}


@dataclass(frozen=True)
class EvalResult:
    """Everything one ``runner eval`` found."""

    eval: str
    task: str
    dataset: str
    variants: tuple[VariantResult, ...]
    comparisons: tuple[Comparison, ...] = ()
    baseline_path: str | None = None
    baseline_missing: bool = False
    created_at: str = ""

    @property
    def exit_code(self) -> int:
        """1 when a variant is below its threshold, else 3 when a batch cap stopped one, else 0."""
        if any(v.below_threshold for v in self.variants):
            return EXIT_FAILED
        return EXIT_CAPPED if any(v.capped for v in self.variants) else EXIT_OK

    def as_dict(self) -> dict[str, Any]:
        return {
            "format_version": FORMAT_VERSION, "eval": self.eval, "task": self.task, "dataset": self.dataset,
            "created_at": self.created_at, "exit_code": self.exit_code,
            "baseline": {"path": self.baseline_path, "missing": self.baseline_missing,
                         "comparisons": [c.as_dict() for c in self.comparisons]},
            "variants": [v.as_dict() for v in self.variants],
        }


def compare(variants: tuple[VariantResult, ...], baseline: dict[str, Any]) -> tuple[Comparison, ...]:
    """Each variant against the baseline's variant of the same name (variants it lacks are skipped)."""
    listed = baseline.get("variants")
    stored = {v["name"]: v for v in listed if isinstance(v, dict) and isinstance(v.get("name"), str)} if isinstance(listed, list) else {}
    found = []
    for variant in variants:
        before = stored.get(variant.name)
        if before is None:
            continue
        was = _stored_results(before.get("results"))
        now = {c.key: c.passed for c in variant.cases}
        found.append(Comparison(
            variant=variant.name, pass_rate=variant.pass_rate, baseline_pass_rate=_number(before.get("pass_rate")),
            cost_per_case=variant.cost_per_case, baseline_cost_per_case=_number(before.get("cost_per_case")),
            latency_p95=variant.latency(95), baseline_latency_p95=_number(before.get("latency_p95")),
            regressions=tuple(k for k, ok in now.items() if not ok and was.get(k) is True),
            fixes=tuple(k for k, ok in now.items() if ok and was.get(k) is False),
        ))
    return tuple(found)


def _stored_results(results: Any) -> dict[str, bool]:
    """``case key -> passed`` from a stored baseline (a file anyone may have edited: entries that
    are not ``{key: text, passed: true|false}`` are left out)."""
    if not isinstance(results, list):
        return {}
    return {c["key"]: c["passed"] for c in results if isinstance(c, dict) and isinstance(c.get("key"), str) and isinstance(c.get("passed"), bool)}


def _number(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None
