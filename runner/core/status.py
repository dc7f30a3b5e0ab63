"""Statuses of runs and steps, their exit codes, and which is worst: defined once."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Literal, TypeVar, get_args

Status = Literal["running", "completed", "failed", "capped", "stuck", "skipped"]
"""A run's or a step's status. ``skipped`` is for steps only (a dependency did not complete)."""

FINAL_STATUSES: tuple[Status, ...] = ("completed", "failed", "capped", "stuck")
"""How a run can end."""

EXIT_CODES: dict[Status, int] = {"completed": 0, "failed": 1, "capped": 3, "stuck": 4}
"""The process exit code of a run that ended with each status (README: Exit codes)."""

SEVERITY: dict[Status, int] = {"capped": 0, "stuck": 1, "failed": 2, "skipped": 3, "running": 4, "completed": 5}
"""Lower is worse: a pipeline reports its worst step, and a cap outranks what it caused."""

EXIT_UNDELIVERED = 5
"""A run that completed and wrote its report, but a delivery (email, webhook, copy) failed:
re-running it with the same run id re-delivers only what failed (README: Exit codes)."""

EXIT_CODE_MEANINGS: tuple[tuple[int, str], ...] = (
    (0, "completed"), (1, "failed"), (2, "configuration or usage error"), (3, "stopped by a cap"), (4, "stuck"),
    (5, "completed, but a report delivery failed"), (130, "interrupted"),
)  # fmt: skip
"""Every exit code of the ``runner`` command and what it means: ``runner --help`` and the
commands' help print this table (README: Exit codes)."""


def exit_codes_text() -> str:
    """``0 completed, 1 failed, ...``: the table above as one line of help text."""
    return ", ".join(f"{code} {meaning}" for code, meaning in EXIT_CODE_MEANINGS)

T = TypeVar("T")


CONFIG_ERROR_KINDS = frozenset({"template"})
"""Failures that are the configuration's fault (a template that cannot render): exit 2, as a
configuration error found before the run would have been."""


def exit_code(status: Status, error_kind: str | None = None) -> int:
    """The exit code of a run that ended ``status`` (anything unfinished counts as failed)."""
    if status == "failed" and error_kind in CONFIG_ERROR_KINDS:
        return 2
    return EXIT_CODES.get(status, 1)


def worst(items: Iterable[T], status_of: Callable[[T], Status]) -> T:
    """The item whose status is worst (the first of equals)."""
    return min(items, key=lambda item: SEVERITY[status_of(item)])


def as_final(status: Status) -> Status:
    """The run status a step status amounts to (a skipped step means the run failed)."""
    return "failed" if status in ("skipped", "running") else status


def is_status(value: object) -> bool:
    return value in get_args(Status)

