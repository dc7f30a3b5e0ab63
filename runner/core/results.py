"""What a run hands back to its caller (the CLI, the batch engine, Airflow)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from runner.core.budget_warnings import BudgetWarning
from runner.core.degradation import Degradation
from runner.core.status import EXIT_UNDELIVERED, Status, exit_code
from runner.core.usage import Usage
from runner.locations import Location


@dataclass(frozen=True)
class RunResult:
    """The outcome of one run. ``usage`` covers every attempt of the run id."""

    run_id: str
    task: str
    status: Status
    output: Any = None
    error: str | None = None
    error_kind: str | None = None  # e.g. cap name, model fault kind, 'input'
    error_scope: str | None = None  # the budget scope whose cap stopped the run
    error_budget: str | None = None  # the budget over time (kind: Budget) whose window that scope is
    usage: Usage = field(default_factory=Usage)
    duration_seconds: float = 0.0
    report_dir: Location | None = None  # a local directory, or a URL's (runner.locations)
    warnings: tuple[str, ...] = ()  # spend that is an estimate, usage above the reservation, ...
    deliveries: tuple[dict[str, Any], ...] = ()  # report.deliver outcomes (name, kind, status, target, error)
    budget_warnings: tuple[BudgetWarning, ...] = ()  # warn_at shares its calls took a budget window past, every attempt's
    degraded: tuple[Degradation, ...] = ()  # steps whose calls went to a fallback model (on_exceed: degrade)

    @property
    def undelivered(self) -> list[str]:
        """Names of the deliveries that failed."""
        return [d["name"] for d in self.deliveries if d.get("status") != "delivered"]

    @property
    def exit_code(self) -> int:
        code = exit_code(self.status, self.error_kind)
        return EXIT_UNDELIVERED if code == 0 and self.undelivered else code

    def manifest(self) -> dict[str, Any]:
        """A small, secret-free summary (for --json, XCom, batch output records)."""
        usage = self.usage.as_dict()
        del usage["total_tokens"]
        return {
            "run_id": self.run_id,
            "task": self.task,
            "status": self.status,
            "exit_code": self.exit_code,
            "error": self.error,
            "error_kind": self.error_kind,
            **usage,
            "duration_seconds": round(self.duration_seconds, 3),
            "report_dir": str(self.report_dir) if self.report_dir else None,
            "warnings": list(self.warnings),
            "degraded": [d.as_dict() for d in self.degraded],
            "deliveries": [{k: d.get(k) for k in ("name", "kind", "status", "target", "error")} for d in self.deliveries],
        }
