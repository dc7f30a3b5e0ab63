"""Before a run spends anything: the directories it will write on this machine can be written.

A project deployed read-only (an image, a checkout an Airflow worker's user does not own)
would otherwise fail when the run store opens, or worse, after the model calls, when the
report is written. Which directories a run writes depends on its options:

* the state directory (:func:`runner.local_state.state_dir`): the SQLite run store unless
  the run has another store (``--store``, a store URL, ``$RUNNER_STORE_URL``), and the
  workspace, memory and knowledge indexes of a task with tools or task files, unless the
  run was given its own workspace;
* ``<root>/reports`` when the run writes a report and was not given a reports directory.
"""

from __future__ import annotations

from runner.config.project import Project
from runner.config.specs import TaskSpec
from runner.local_state import STATE_DIR_ENV, confined_tree, refuse_outside, require_writable, state_dir
from runner.runs.options import RunOptions
from runner.runs.workspace import uses_workspace
from runner.store.database import store_url_from_env

STATE_FIX = (
    f"set ${STATE_DIR_ENV} to a directory this user can write (the project itself may stay read-only), "
    "or use a shared store ($RUNNER_STORE_URL; under Airflow $RUNNER_STORE_CONN_ID)"
)
REPORTS_FIX = "give the run a reports directory (--reports-dir; under Airflow $RUNNER_REPORTS_DIR or reports_dir=)"


def check_local_dirs(
    project: Project, task: TaskSpec, options: RunOptions, *, store_given: bool = False, run_id: str | None = None
) -> None:
    """Raise a :class:`~runner.errors.UsageError` naming the directory and the fix when this
    run could not write where it is going to (see the module doc). ``store_given``: the
    caller opened the run store (a batch hands its rows one); ``run_id``: the run's report
    directory (a resumed run's may exist) holds no link out of the project."""
    own_store = store_given or any(v is not None for v in (options.store_path, options.store_url, store_url_from_env()))
    workspace = options.workspace_dir is None and uses_workspace(project, task)
    if not own_store or workspace:
        holds = "the runner's local state: " + ", ".join(
            part for part, used in (("the run store", not own_store), ("run workspaces", workspace)) if used
        )
        require_writable(state_dir(project.root), holds, STATE_FIX)
    if options.write_report and options.reports_dir is None:
        refuse_outside(project.root / "reports" / task.name, project.root, "run reports", REPORTS_FIX)  # a link out of the project
        require_writable(project.root / "reports", "run reports", REPORTS_FIX, inside=project.root)
        if run_id is not None:
            confined_tree(project.root / "reports" / task.name / run_id, project.root, "run reports", REPORTS_FIX)
