"""RunnerTaskOperator: run one runner task per Airflow task instance (mappable).

::

    from runner.airflow.operator import RunnerTaskOperator

    RunnerTaskOperator(
        task_id="summarise",
        task="daily_report",                     # a task name, or a tasks.d/*.yaml path
        inputs={"date": "{{ ds }}"},             # templated (also: task, caps, root, paths, conn_id)
        root="/srv/runner-project",              # default: $RUNNER_ROOT
        conn_id="runner_model_default",          # a runner_model connection (base URL + API key)
        pool="runner_model",                     # optional: an Airflow pool to cap concurrent runs
        retries=2,
    )

A try after a failed try uses the same runner run id (see
:func:`runner.airflow.execution.derive_run_id`), so a retry *resumes* the run: steps that
completed are not paid for again. A try after a successful one (a clear after a success)
starts the run id's next generation, a new run (:func:`runner.airflow.execution.current_run_id`).
The task has a "Runner report" link (:mod:`runner.airflow.links`); its Asset outlets get the
manifest on their events (:mod:`runner.airflow.assets`). With a shared store (``store_conn_id``, or
``$RUNNER_STORE_CONN_ID`` / ``$RUNNER_STORE_URL``: see :mod:`runner.airflow.store`) that holds
on any worker, whatever its local disk holds; ``reports_dir`` (default ``$RUNNER_REPORTS_DIR``,
else ``<root>/reports``) may be a URL such as ``s3://bucket/reports``. The return value (pushed to XCom as ``return_value``) is
``{run_id, status, cost_usd, report_path, exit_code}`` -- never the key or the run's output.

Status policy: ``completed`` succeeds; statuses in ``no_retry_statuses`` (default ``capped``
and ``stuck``: trying again would hit the same cap) fail the task without retries; any other
status (``failed``: a model fault, a failed step) fails the try, and Airflow retries it.
Configuration or input errors (raised before anything is spent) fail without retries.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Collection, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from airflow.sdk import BaseOperator

from runner.airflow._compat import AirflowException, AirflowFailException, AirflowNotFoundException
from runner.airflow.assets import annotate_outlets
from runner.airflow.execution import run_task_for_airflow
from runner.airflow.failures import run_failure
from runner.airflow.links import RunnerReportLink
from runner.airflow.provider import DEFAULT_CONN_ID
from runner.core.status import EXIT_UNDELIVERED

if TYPE_CHECKING:
    from airflow.sdk import Context

ROOT_ENV = "RUNNER_ROOT"
REPORTS_ENV = "RUNNER_REPORTS_DIR"
"""Where run reports go when the operator is given no ``reports_dir``: a path or a URL every worker reaches."""
DEFAULT_NO_RETRY_STATUSES = ("capped", "stuck")


def resolve_root(root: str | os.PathLike[str] | None) -> str:
    """The project root: ``root``, else ``$RUNNER_ROOT``; an absolute path (``~`` expanded).

    A relative one is refused: a task starts in whatever directory its worker has (often
    ``/``), so it would name a different directory on every worker."""
    given = root not in (None, "")
    value = str(root) if given else os.environ.get(ROOT_ENV, "")
    if not value:
        raise AirflowFailException(f"no runner project root: pass root=... or set ${ROOT_ENV} on the workers")
    expanded = os.path.expanduser(value)
    if not os.path.isabs(expanded):
        where = "root=" if given else f"${ROOT_ENV}"
        raise AirflowFailException(
            f"{where} {value!r} is a relative path; give the project's absolute path (a task starts in its worker's "
            f"directory, here {os.getcwd()!r}, not in yours)"
        )
    return expanded


def model_credentials(conn_id: str | None) -> tuple[str | None, str | None]:
    """``(base_url, api_key)`` from a ``runner_model`` connection; (None, None) when none applies.

    ``conn_id=None`` means "no connection" (the agent's ``model:`` block / OPENAI_* env apply).
    A missing *default* connection is the same; a missing explicitly named one is an error.
    """
    if not conn_id:
        return None, None
    from runner.airflow.hook import RunnerModelHook

    try:
        return RunnerModelHook(runner_model_conn_id=conn_id).get_conn()
    except AirflowNotFoundException:
        if conn_id == DEFAULT_CONN_ID:
            return None, None
        raise


def dag_run_identity(context: Context) -> tuple[str, str, str, int]:
    """``(dag_id, dag run_id, task_id, map_index)`` of the running task instance."""
    ti = context["ti"]
    map_index = getattr(ti, "map_index", -1)
    return str(ti.dag_id), str(context["run_id"]), str(ti.task_id), -1 if map_index is None else int(map_index)


@contextlib.contextmanager
def fail_without_retry(what: str) -> Iterator[None]:
    """Turn a runner error a retry cannot fix (exit code 2: configuration, input, usage) into a
    task failure without retries, its message prefixed by ``what``. Other errors pass through."""
    from runner.errors import EXIT_CONFIG, RunnerError

    try:
        yield
    except RunnerError as exc:
        if exc.exit_code != EXIT_CONFIG:
            raise
        raise AirflowFailException(f"{what}: {exc}") from None  # the message says it all: no runner traceback in the log


def check_status(manifest: Mapping[str, Any], no_retry_statuses: Collection[str]) -> None:
    """Fail the task unless the run completed; the message states status, error kind and error."""
    if manifest.get("status") == "completed":
        if manifest.get("exit_code") == EXIT_UNDELIVERED:  # the report is written; a retry re-delivers what failed
            raise AirflowException(f"runner run {manifest.get('run_id')} completed, but a report delivery failed: "
                                   f"{manifest.get('error') or 'see the run record'}; a retry re-delivers only what failed")
        return
    message = run_failure(manifest)
    if manifest.get("status") in no_retry_statuses:
        raise AirflowFailException(message)
    raise AirflowException(message + "; a retry resumes the same run")


class RunnerTaskOperator(BaseOperator):
    """Run (or resume) the runner task ``task`` with ``inputs``; return a small manifest.

    A try after a failed try resumes the same runner run (nothing finished is paid for again);
    a try after a success (a clear) recomputes it as a new run.

    Args:
        task: The task's name in the project (``tasks.d/``); templated.
        inputs: The task's inputs: a mapping, or its JSON text (each value is typed by the task's declared inputs).
        caps: Caps that tighten the task's own (``max_cost_usd``, ``max_tokens``, ...), checked by type.
        root: The project folder; default ``$RUNNER_ROOT``.
        conn_id: The ``runner_model`` connection holding the endpoint (host) and API key (password); ``None``: no connection, the agents' own settings.
        store_path: A SQLite run store file instead of the project's (``.runner/runs.sqlite3``).
        reports_dir: Where reports go (a path or an fsspec URL); default ``$RUNNER_REPORTS_DIR``, else the project's ``reports/``.
        store_conn_id: A postgres connection for the shared run store and cap ledger; default ``$RUNNER_STORE_CONN_ID``.
        no_retry_statuses: Run statuses that fail the task without a retry (a retry would be refused again); default capped and stuck.
    """

    template_fields: Sequence[str] = (
        "task", "inputs", "caps", "root", "store_path", "reports_dir", "conn_id", "store_conn_id",
    )  # fmt: skip
    template_fields_renderers: ClassVar[dict[str, str]] = {"inputs": "json", "caps": "json"}
    ui_color = "#e8f0fe"
    operator_extra_links = (RunnerReportLink(),)

    def __init__(
        self,
        *,
        task: str,
        inputs: dict[str, Any] | None = None,
        caps: dict[str, Any] | None = None,
        root: str | None = None,
        conn_id: str | None = DEFAULT_CONN_ID,
        store_path: str | None = None,
        reports_dir: str | None = None,
        store_conn_id: str | None = None,
        no_retry_statuses: Collection[str] = DEFAULT_NO_RETRY_STATUSES,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.task = task
        self.inputs = inputs
        self.caps = caps
        self.root = root
        self.conn_id = conn_id
        self.store_path = store_path
        self.reports_dir = reports_dir
        self.store_conn_id = store_conn_id
        self.no_retry_statuses = tuple(no_retry_statuses)
        self.last_manifest: dict[str, Any] | None = None  # this try's, for the report link

    def execute(self, context: Context) -> dict[str, Any]:
        from runner.airflow.store import shared_store_url
        from runner.config.typed_values import optional_text, required_text, typed_caps

        dag_id, dag_run_id, task_id, map_index = dag_run_identity(context)
        with fail_without_retry(f"runner task {self.task!r}"):  # found before anything was spent
            task = required_text(self.task, "task")
            caps = typed_caps(self.caps, "caps").as_dict()
            inputs = _inputs(self.inputs)
            root = resolve_root(self.root)
            base_url, api_key = model_credentials(self.conn_id)
            store_url = shared_store_url(optional_text(self.store_conn_id, "store_conn_id"))
            reports_dir = optional_text(self.reports_dir, "reports_dir") or os.environ.get(REPORTS_ENV) or None
            from runner.airflow.sql_connections import source_urls

            urls = source_urls(root, task)  # SQL sources given as Airflow connections
            from runner.airflow.progress import TaskLogProgress

            progress = TaskLogProgress(self.log, [api_key, *urls.values()])  # the run's readable lines, in the task log
            manifest = run_task_for_airflow(
                task, root=root, inputs=inputs, caps=caps or None, dag_id=dag_id, dag_run_id=dag_run_id,
                task_id=task_id, map_index=map_index, store_path=self.store_path, reports_dir=reports_dir,
                model_base_url=base_url, api_key=api_key, store_url=store_url, source_urls=urls,
                trace_carrier=getattr(context["ti"], "context_carrier", None),  # the task's trace, when Airflow has one
                events=progress,
            )  # fmt: skip
        self.log.info(
            "runner run %s: %s (exit %s, %.6f USD), report %s",
            manifest["run_id"],
            manifest["status"],
            manifest["exit_code"],
            manifest["cost_usd"],
            manifest["report_path"],
        )
        self.last_manifest = manifest
        if manifest["status"] != "completed":
            context["ti"].xcom_push(key="manifest", value=manifest)
        check_status(manifest, self.no_retry_statuses)
        annotate_outlets(context, self.outlets, manifest)
        return manifest

    def on_kill(self) -> None:
        """Killed while running (marked failed or cleared, the worker stopping): stop the run as
        Ctrl-C does; the next try resumes it (:func:`runner.airflow.deadline.cancel_the_running_run`)."""
        from runner.airflow.deadline import cancel_the_running_run

        if cancel_the_running_run():
            self.log.warning("runner task %r killed: its run is cancelled; the next try resumes it", self.task)


def _inputs(value: Any) -> dict[str, Any]:
    """The rendered ``inputs``: a mapping or its JSON text (the runner types each value by the task's inputs)."""
    import json

    from runner.errors import UsageError

    if value is None:
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise UsageError(f"inputs: {value!r} is neither a mapping nor its JSON text") from None
    if not isinstance(value, Mapping):
        raise UsageError(f"inputs: expected a mapping of input names to values, got {value!r}")
    return dict(value)
