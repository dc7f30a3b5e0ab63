"""A budget warning as something to deliver: what a budget's ``deliver:`` targets are sent when
a run's call takes one of its windows past a ``warn_at`` share.

The same :class:`~runner.reports.delivery.outcome.Package` a run's report is delivered as, so
every delivery kind sends it as it sends a report: ``budget_warning.md`` and
``budget_warning.json`` (attached to an email, copied by a copy delivery), a title and a summary
for the message, and the warning's fields (``budget_warning``) in a webhook's JSON.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import date
from pathlib import Path
from typing import Any

from runner.core.budget_warnings import BudgetWarning
from runner.files import write_text_atomic
from runner.reports.delivery.outcome import Package

STATUS = "warning"
"""The status a budget warning is delivered with (a webhook's ``status``, an email's default subject)."""


def warning_package(
    warning: BudgetWarning, run_id: str, task: str, directory: Path, environ: Mapping[str, str]
) -> Package:
    """``warning``, met by run ``run_id`` of ``task``, written into ``directory`` and packaged."""
    title = f"Budget '{warning.budget}' passed {warning.threshold:.0%} of {warning.cap}"
    summary = f"{warning.message}.\nRun {run_id} (task {task}) made the call that took the window past it."
    facts = {**warning.as_dict(), "run_id": run_id, "task": task}
    markdown, data = directory / "budget_warning.md", directory / "budget_warning.json"
    write_text_atomic(markdown, f"# {title}\n\n{summary}\n")
    write_text_atomic(data, json.dumps(facts, indent=2, ensure_ascii=False) + "\n")
    return Package(
        report_dir=directory, files={"markdown": markdown, "json": data}, title=title, status=STATUS, summary=summary,
        run_id=run_id, task=task, environ=environ, facts={"budget_warning": facts},
    )  # fmt: skip


def warning_context(warning: BudgetWarning, run_id: str, task: str, today: date) -> dict[str, Any]:
    """What the templates of a budget's delivery read (``report_options.WARNING_TEMPLATE_ROOTS``)."""
    return {"budget": warning.budget, "warning": warning.as_dict(), "run_id": run_id, "task": task, "today": today.isoformat()}
