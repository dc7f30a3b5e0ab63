"""What a caller hands to a run, and what a run hands back."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from runner.config.specs import Caps

if TYPE_CHECKING:
    from runner.caps.budget import Budget

STATUS_EXIT = {"completed": 0, "failed": 1, "capped": 3, "stuck": 4}
CONFIG_ERROR_KINDS = frozenset({"template"})  # a failure that is a configuration error: exit 2


class RateGate(Protocol):
    """A shared rate limiter the run consults before each model call (batch runs)."""

    async def acquire(self, estimated_tokens: int) -> None: ...

    def pause(self, seconds: float) -> None:
        """Hold every caller for ``seconds`` (a 429 with Retry-After seen by anyone)."""


class EventSink(Protocol):
    """Receives run events (dicts with an ``event`` key); the CLI renders them."""

    def __call__(self, event: dict[str, Any]) -> None: ...


@dataclass
class RunOptions:
    """How to run one task. Everything optional has a sensible default."""

    run_id: str | None = None
    caps: Caps = field(default_factory=Caps)  # tightens the task's caps for this run
    parent_budget: Budget | None = None  # e.g. the batch's budget
    store_path: Path | None = None  # SQLite run store; default <root>/.runner/runs.sqlite3
    reports_dir: Path | None = None  # default <root>/reports; None with write_report=False
    write_report: bool = True
    workspace_dir: Path | None = None  # default <root>/.runner/workspaces/<run_id>
    model_override: str | None = None  # --model
    base_url_override: str | None = None  # --base-url
    api_key: str | None = None  # given by the caller (e.g. Airflow connection), never logged
    rate_gate: RateGate | None = None
    events: EventSink | None = None
    resume: bool = True  # a run id seen before resumes: completed steps are not re-run


@dataclass
class RunResult:
    """The outcome of one run."""

    run_id: str
    task: str
    status: str  # completed | failed | capped | stuck
    output: Any = None
    error: str | None = None
    error_kind: str | None = None  # e.g. cap name, model fault kind, 'input'
    cost_usd: float = 0.0
    input_tokens: int = 0
    output_tokens: int = 0
    model_calls: int = 0
    tool_calls: int = 0
    duration_seconds: float = 0.0
    report_dir: Path | None = None

    @property
    def exit_code(self) -> int:
        if self.status == "failed" and self.error_kind in CONFIG_ERROR_KINDS:
            return 2
        return STATUS_EXIT.get(self.status, 1)

    def manifest(self) -> dict[str, Any]:
        """A small, secret-free summary (for --json, XCom, batch output records)."""
        return {
            "run_id": self.run_id,
            "task": self.task,
            "status": self.status,
            "exit_code": self.exit_code,
            "error": self.error,
            "error_kind": self.error_kind,
            "cost_usd": round(self.cost_usd, 8),
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "model_calls": self.model_calls,
            "tool_calls": self.tool_calls,
            "duration_seconds": round(self.duration_seconds, 3),
            "report_dir": str(self.report_dir) if self.report_dir else None,
        }
