"""RunnerBatchOperator: one runner batch as one Airflow task; with a provider batch, deferrable.

::

    from runner.airflow.batch_operator import RunnerBatchOperator

    RunnerBatchOperator(
        task_id="triage",
        task="triage_ticket",
        input_path="in/tickets.csv",             # relative to the project root, or a URL
        output_path="out/triage.jsonl",           # default: <work dir>/output.jsonl
        via="batch-api",                          # one provider batch (about half price), or "live"
        deferrable=True,                          # wait in the triggerer, no worker slot held
        options={"id_column": "id", "max_cost_usd": 5, "max_wall_seconds": 86400},
        conn_id="runner_model_default",           # a runner_model connection (base URL + API key)
        store_conn_id="runner_store",             # the shared PostgreSQL store (or $RUNNER_STORE_CONN_ID)
        retries=2,
    )

``options`` are ``runner batch``'s options by flag name (:mod:`runner.airflow.options` says
which apply to a provider batch). Every argument but ``deferrable`` may be a template.

Deferrable, step by step: ``execute`` runs the batch without waiting for the provider
(``BatchRequest.provider_wait=False``): the rows are reserved at batch prices, submitted,
their provider batch id recorded in the batch's journal; if the batch is still out, the
task defers on :class:`~runner.airflow.triggers.ProviderBatchTrigger` and leaves the worker.
When the trigger fires, ``execute_complete`` runs the same request again, which re-attaches
to the recorded batch and collects it (or submits the next round and defers again), until
nothing is out. The journal is named after the dag run and task (in the shared store when
there is one), so a retry on any worker re-attaches to the batch already out and never
submits it again.

A retry after a failed try resumes the batch (rows done stay done; provider batches out are
re-attached); a try after a successful one (the task cleared after it succeeded) computes the
batch again, as its next generation: a new journal, the output and report rewritten where they
were (:mod:`runner.airflow.generations`).

Status policy (both modes): every row done succeeds, returning the batch manifest
(counts, spend, paths; no row data). Rows not done fail the try while another try may
finish them (retryable errors, e.g. an expired provider batch: the retry resubmits only
those rows) and tries remain; otherwise the task succeeds if at most ``max_failed_rows``
rows are not done, and fails without retries if more. A cap (``max_cost_usd``, the wall
cap ``max_wall_seconds``, which cancels what is still out) is never retried. The trigger's
errors: ``unreachable`` fails the try (a retry re-attaches); ``auth``, ``not_found``,
``bad_request`` and ``no_key`` fail without retries. ``execution_timeout`` bounds each try,
deferred time included.

Killing the task: marking a *deferred* task failed or successful, or clearing it, makes
Airflow's triggerer call the trigger's ``on_kill`` (Airflow 3.3), which cancels the provider
batches still out (``cancel_on_kill=False`` leaves them running). Airflow calls it only on a
trigger a triggerer runs: a kill before one has picked the trigger up leaves the batch out
(its id is in the task log); a cleared task's next try
re-attaches and collects the rows that finished, and the others go as an expired batch's do
(the try fails, the retry resubmits only them). A triggerer
restart is no kill: the trigger is rebuilt from its stored arguments and waits for the
same batches. A task killed while it runs in a worker (submitting, collecting, or waiting
there with ``deferrable=False``) gets ``on_kill`` from Airflow (SIGTERM in the task
process, or its ``execution_timeout``): it cancels the provider batches the batch has out at
that moment, and any being created (found by their metadata), in both modes, and logs each
one; ``cancel_on_kill=False`` leaves them running for the next try to re-attach to. A
``kill -9`` of the worker calls nothing: the journal records the batch and the next try
re-attaches to it (cancel it at the provider if nobody will run the task again).
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from airflow.sdk import BaseOperator

from runner.airflow._compat import AirflowException, AirflowFailException
from runner.airflow.assets import annotate_outlets
from runner.airflow.links import RunnerReportLink
from runner.airflow.operator import dag_run_identity, fail_without_retry, model_credentials, resolve_root
from runner.airflow.options import (
    check_option_names,
    check_provider_batch_options,
    literal_options,
    options_mapping,
    typed_options,
)
from runner.airflow.provider import DEFAULT_CONN_ID

if TYPE_CHECKING:
    from airflow.sdk import Context

    from runner.airflow.batch_wait import BatchWaitEvent
    from runner.airflow.execution import BatchStep
    from runner.airflow.generations import Generation
    from runner.batch.provider_cancel import ProviderWatch
    from runner.batch.request import BatchRequest
    from runner.config.project import Project
    from runner.config.specs import TaskSpec
    from runner.locations import Location

FINAL_TRIGGER_ERRORS = frozenset({"auth", "not_found", "bad_request", "no_key"})
"""Trigger errors another try cannot cure; ``unreachable`` may pass."""


def _default_deferrable() -> bool:
    """Airflow's ``[operators] default_deferrable`` (the convention for deferrable operators)."""
    from airflow.sdk import conf

    return conf.getboolean("operators", "default_deferrable", fallback=False)


@dataclass(frozen=True)
class _Batch:
    """One call's rendered, typed arguments: the project, the task, its batch request, the
    connection whose key the request carries, and how many rows may end not done."""

    project: Project
    spec: TaskSpec
    request: BatchRequest
    conn_id: str | None
    max_failed_rows: int
    work: Location
    generation: Generation


class RunnerBatchOperator(BaseOperator):
    """Run (or resume) the runner batch of ``task`` over ``input_path``; return its manifest.

    Args:
        task: The task's name in the project; templated.
        input_path: The CSV, JSONL or Parquet file of rows, relative to the project root.
        output_path: The output records file (a path or URL); default a file in the run's work directory.
        report_dir: Where the batch report goes; default next to the output.
        via: ``batch-api`` (provider batches at batch prices; the task defers while they run) or ``live``.
        deferrable: Wait for provider batches in the triggerer (True) or in the worker (False); default Airflow's ``[operators] default_deferrable``.
        options: ``runner batch`` options by flag name (a mapping, or one template rendered to a mapping or its JSON).
        batch_fallback: ``live``: rows a provider batch cannot take run as live calls; default none (they fail).
        batch_poll_seconds: Seconds between status checks of a provider batch.
        unreachable_seconds: How long the provider may stay unreachable before the task fails.
        max_failed_rows: Failed rows the task tolerates before it fails (default 0: a failed row fails the task, so its retry runs the row again).
        root: The project folder; default ``$RUNNER_ROOT``.
        work_dir: The folder of journals and outputs shared by tries; default ``$RUNNER_AIRFLOW_WORK_DIR``.
        conn_id: The ``runner_model`` connection holding the endpoint and API key.
        store_conn_id: A postgres connection for the shared run store, journal and cap ledger.
        store_path: A SQLite run store file instead of the project's.
        cancel_on_kill: Cancel the provider batches at the provider when the task is killed (marked failed, cleared, timed out); False leaves them for the next try."""

    template_fields: Sequence[str] = (
        "task", "input_path", "output_path", "report_dir", "options", "via", "batch_fallback", "batch_poll_seconds",
        "max_failed_rows", "root", "work_dir", "conn_id", "store_conn_id", "store_path",
    )  # fmt: skip
    template_fields_renderers: ClassVar[dict[str, str]] = {"options": "json"}
    operator_extra_links = (RunnerReportLink(),)
    ui_color = "#e6f4ea"

    def __init__(
        self,
        *,
        task: str,
        input_path: str,
        output_path: str | None = None,
        report_dir: str | None = None,
        via: str = "batch-api",
        deferrable: bool | None = None,
        options: Mapping[str, Any] | str | None = None,
        batch_fallback: str | None = None,
        batch_poll_seconds: float | str = 30.0,
        unreachable_seconds: float = 1800.0,
        max_failed_rows: int | str | None = 0,
        root: str | None = None,
        work_dir: str | None = None,
        conn_id: str | None = DEFAULT_CONN_ID,
        store_conn_id: str | None = None,
        store_path: str | None = None,
        cancel_on_kill: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.task = task
        self.input_path = input_path
        self.output_path = output_path
        self.report_dir = report_dir
        self.via = via
        self.deferrable = deferrable  # None: Airflow's [operators] default_deferrable
        self.options = literal_options(options, f"{self.task_id}: options")  # a template: checked once rendered
        self.batch_fallback = batch_fallback
        self.batch_poll_seconds = batch_poll_seconds
        self.unreachable_seconds = unreachable_seconds
        self.max_failed_rows = max_failed_rows
        self.root = root
        self.work_dir = work_dir
        self.conn_id = conn_id
        self.store_conn_id = store_conn_id
        self.store_path = store_path
        self.cancel_on_kill = cancel_on_kill
        self._watch: ProviderWatch | None = None  # the provider batches of the step running in this worker
        self.last_manifest: dict[str, Any] | None = None  # this try's, for the report link

    # --- the steps Airflow calls --------------------------------------------------------

    def on_kill(self) -> None:
        """Killed in the worker: cancel the provider batches out now (see the module doc); called
        from Airflow's SIGTERM handler while the batch's event loop runs, so it never raises."""
        watch = self._watch
        if watch is None or not self.cancel_on_kill:
            self.log.warning(
                "runner batch %r killed in the worker: a provider batch already submitted keeps running (%s) and the "
                "next try re-attaches to it; the batch's journal names it", self.task,
                "cancel_on_kill=False" if watch is not None else "none was out",
            )  # fmt: skip
            return
        try:
            cancelled = watch.cancel(lambda text: self.log.warning("runner batch %r killed: %s", self.task, text))
        except Exception as exc:  # a kill handler must not raise; the batch stays out, its id in the journal
            self.log.warning("runner batch %r killed; its provider batches could not be cancelled: %s", self.task, type(exc).__name__)
            return
        if not cancelled:
            self.log.info("runner batch %r killed in the worker: no provider batch was out to cancel", self.task)

    def execute(self, context: Context) -> dict[str, Any]:
        return self._step(context)

    def execute_complete(self, context: Context, event: Any = None) -> dict[str, Any]:
        """Resume after the trigger fired: check its event, then collect (or defer again)."""
        from runner.airflow.batch_wait import BatchWaitEvent

        with fail_without_retry(f"runner batch {self.task!r}"):
            waited = BatchWaitEvent.from_payload(event)
        self._check_event(waited)
        return self._step(context, waited)

    def _step(self, context: Context, waited: BatchWaitEvent | None = None) -> dict[str, Any]:
        from runner.airflow.execution import batch_step_for_airflow
        from runner.batch.provider_cancel import ProviderWatch

        with fail_without_retry(f"runner batch {self.task!r}"):
            batch = self._batch(context)
            # kept after the step too: an execution_timeout unwinds the step before Airflow calls on_kill
            self._watch = ProviderWatch() if batch.request.mode(batch.spec) == "batch-api" else None
            step = batch_step_for_airflow(
                batch.project, batch.spec, replace(batch.request, watch=self._watch),
                getattr(context["ti"], "context_carrier", None),
            )  # fmt: skip
        if step.pending:
            self._defer(context, batch, step)
        return self._finish(context, batch, step, waited)

    # --- preparing a call ---------------------------------------------------------------

    def _batch(self, context: Context) -> _Batch:
        """The rendered arguments, typed and checked (a bad one raises a runner ``UsageError``)."""
        from runner.airflow.generations import current_generation
        from runner.airflow.plan import FanoutPlan, run_key, run_work_dir
        from runner.airflow.store import shared_store_url
        from runner.batch.options import OPTIONS
        from runner.config.typed_values import optional_int, optional_text, required_text
        from runner.errors import UsageError

        dag_id, dag_run_id, task_id, map_index = dag_run_identity(context)
        via = OPTIONS["via"].typed(self.via, "via") or "batch-api"
        fallback = OPTIONS["batch_fallback"].typed(self.batch_fallback, "batch_fallback")
        if via == "live" and (self.deferrable or fallback):
            raise UsageError(
                "deferrable=True and batch_fallback need via='batch-api' (a live batch runs in the worker)"
            )
        deferrable = _default_deferrable() if self.deferrable is None else bool(self.deferrable)
        options = options_mapping(self.options)
        check_option_names(options)
        if via == "batch-api":
            check_provider_batch_options(options)
        name = task_id if map_index < 0 else f"{task_id}-{map_index}"
        root = Path(resolve_root(self.root))
        work = run_work_dir(optional_text(self.work_dir, "work_dir"), dag_id, dag_run_id, name)
        generation = current_generation(work)  # a try after a success computes the batch again
        plan = FanoutPlan(
            task=required_text(self.task, "task"), root=root, input_path=root / required_text(self.input_path, "input_path"),
            work=work, options=typed_options(options), key=run_key(dag_id, dag_run_id, name),
            store_url=shared_store_url(optional_text(self.store_conn_id, "store_conn_id")), generation=generation.number,
        )  # fmt: skip
        output = plan.merged_output_path(optional_text(self.output_path, "output_path"))
        plan.check_merged_output(output)
        project, spec = plan.load()
        base_url, api_key = model_credentials(self.conn_id)
        store = optional_text(self.store_path, "store_path")
        request = replace(
            plan.request(try_number=generation.try_here(context["ti"].try_number), model_base_url=base_url, api_key=api_key,
                         store_path=Path(store) if store else None),
            output_path=output,
            report_dir=plan.merged_report_dir(optional_text(self.report_dir, "report_dir")), via=via,
            batch_fallback=fallback, provider_wait=not deferrable,
            batch_poll_seconds=OPTIONS["batch_poll_seconds"].typed(self.batch_poll_seconds, "batch_poll_seconds")
            or OPTIONS["batch_poll_seconds"].default,
        )  # fmt: skip
        allowed = optional_int(self.max_failed_rows, "max_failed_rows", minimum=0) or 0
        return _Batch(project, spec, request, self.conn_id if api_key else None, allowed, work, generation)

    # --- deferring ----------------------------------------------------------------------

    def _defer(self, context: Context, batch: _Batch, step: BatchStep) -> None:
        """Leave the worker until the provider batches ``step.pending`` have ended."""
        from runner.airflow.deferral import DeadlinePassed, cancel_at, defer_timeout, key_source
        from runner.airflow.triggers import ProviderBatchTrigger

        wall = batch.request.batch_caps.max_wall_seconds
        cancel = cancel_at(wall, step.age_seconds, time.time())
        with fail_without_retry(f"runner batch {self.task!r}"):  # the key's source, the trigger's arguments
            where = key_source(batch.project, batch.spec, batch.request, batch.conn_id)
            trigger = ProviderBatchTrigger(
                step.pending, where.base_url, conn_id=where.conn_id, api_key_env=where.api_key_env,
                poll_seconds=batch.request.batch_poll_seconds, unreachable_seconds=self.unreachable_seconds,
                cancel_at=cancel, cancel_reason=None if wall is None else f"max_wall_seconds={wall:g}",
                cancel_on_kill=bool(self.cancel_on_kill),
            )  # fmt: skip
        try:
            timeout = defer_timeout(self._try_deadline(context), cancel, dt.datetime.now(dt.UTC))
        except DeadlinePassed as passed:
            raise AirflowException(
                f"{passed} while provider batch {', '.join(step.pending)} is out; a retry re-attaches to it"
            ) from None
        self.log.info(
            "provider batch %s is out (%d row(s) running); deferring to the triggerer", ", ".join(step.pending),
            step.manifest["counts"].get("running", 0),
        )  # fmt: skip
        self.defer(trigger=trigger, method_name="execute_complete", timeout=timeout)

    def _try_deadline(self, context: Context) -> dt.datetime | None:
        """When this try's ``execution_timeout`` ends (Airflow keeps a try's start across deferrals)."""
        started = getattr(context["ti"], "start_date", None)
        if self.execution_timeout is None or started is None:
            return None
        return started + self.execution_timeout

    def _check_event(self, waited: BatchWaitEvent) -> None:
        """Fail on a trigger error: without retries unless another try may pass (``unreachable``)."""
        if waited.status != "error":
            if waited.cancelled_for:
                self.log.warning(
                    "%s reached: provider batch(es) %s cancelled", waited.cancelled_for, dict(waited.batches)
                )
            return
        message = f"runner batch {self.task!r}: waiting for provider batch(es) failed: {waited.kind}: {waited.message}"
        if waited.kind in FINAL_TRIGGER_ERRORS:
            raise AirflowFailException(message)
        raise AirflowException(message + "; a retry re-attaches to the batch")

    # --- finishing ----------------------------------------------------------------------

    def _finish(
        self, context: Context, batch: _Batch, step: BatchStep, waited: BatchWaitEvent | None
    ) -> dict[str, Any]:
        """Apply the status policy (see the module doc) to the batch's rows; return its manifest."""
        from runner.airflow.failures import cap_stop, rows_failure
        from runner.airflow.fanout import read_batch_report
        from runner.config.specs import CAP_NAMES
        from runner.errors import EXIT_CAPPED

        manifest, left = dict(step.manifest), step.left
        self.last_manifest = manifest
        wall = batch.request.batch_caps.max_wall_seconds
        if left.not_done and wall is not None and step.age_seconds >= wall and manifest.get("stop_kind") is None:
            reason = (waited.cancelled_for if waited else None) or f"max_wall_seconds={wall:g}"
            manifest.update(stop_reason=f"{reason} reached", stop_kind="max_wall_seconds", exit_code=EXIT_CAPPED)
        self.log.info(
            "runner batch %s: %s done, %s failed, %s invalid, %s not run; %.6f USD; output %s",
            manifest["batch_id"], left.done, left.failed, left.invalid, left.not_run, manifest["cost_usd"],
            manifest["output_path"],
        )  # fmt: skip
        if not left.not_done:
            return self._succeed(context, batch, manifest)
        assert batch.request.report_dir is not None
        message = rows_failure(read_batch_report(batch.request.report_dir), left)
        ti = context["ti"]
        if manifest.get("stop_kind") in CAP_NAMES:  # a retry would only be refused again
            message += cap_stop(manifest)
        elif left.retryable and ti.try_number <= getattr(ti, "max_tries", self.retries or 0):
            ti.xcom_push(key="manifest", value=manifest)
            raise AirflowException(
                f"{message}. {left.retryable} of them may succeed on another try: the retry resumes the batch"
            )
        if left.not_done > batch.max_failed_rows:
            ti.xcom_push(key="manifest", value=manifest)
            raise AirflowFailException(
                f"{message}. That is more than max_failed_rows={batch.max_failed_rows}; every row is in "
                f"{manifest['output_path']} and the report in {batch.request.report_dir}"
            )
        self.log.warning(
            "%s. No further try can finish them; at most max_failed_rows=%d may be", message, batch.max_failed_rows
        )
        return self._succeed(context, batch, manifest)

    def _succeed(self, context: Context, batch: _Batch, manifest: dict[str, Any]) -> dict[str, Any]:
        """Record the success (a later try computes the batch again: :mod:`runner.airflow.generations`), return the manifest.

        The record is the last thing the try does: a try that fails after it would have its
        retry compute the batch again and pay for it twice."""
        from runner.airflow.generations import record_success

        annotate_outlets(context, self.outlets, manifest)
        record_success(batch.work, batch.generation, context["ti"].try_number, manifest)
        return manifest
