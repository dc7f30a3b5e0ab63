"""Before a batch runs a row: the directories it will write on this machine can be written
(a read-only project would otherwise fail after every row was paid for, when the report
is written). See :mod:`runner.runs.local_dirs` for a single run's."""

from __future__ import annotations

from runner.batch.request import BatchRequest, journal_database
from runner.config.project import Project
from runner.local_state import refuse_outside, require_writable, state_dir
from runner.runs.local_dirs import STATE_FIX

REPORT_FIX = "give the batch a report directory (--report-dir)"


def check_batch_dirs(project: Project, request: BatchRequest, task: str = "") -> None:
    """Raise a :class:`~runner.errors.UsageError` naming the directory and the fix when the
    batch's default journal or report directory (of ``task``) cannot be written, or leads
    out of the project through a symbolic link."""
    if request.journal_path is None and journal_database(request) is None:
        require_writable(state_dir(project.root), "the runner's local state: batch journals", STATE_FIX)
    if request.report_dir is None:
        refuse_outside(project.root / "reports" / task, project.root, "batch reports", REPORT_FIX)  # a link out of the project
        require_writable(project.root / "reports", "batch reports", REPORT_FIX, inside=project.root)
