"""Fan a batch out over Airflow workers: split -> one mapped batch per shard -> merge.

::

    from runner.airflow.fanout import batch_fanout

    with DAG("classify_tickets", schedule=None, ...):
        batch_fanout(task="triage_ticket", input_path="/shared/in/tickets.csv", num_shards=8,
                     id_column="id", max_cost_usd=5, work_dir="s3://bucket/runner-airflow",
                     store_conn_id="runner_store", retries=2)

``batch_fanout`` takes the options of ``runner batch`` by their flag names (see
:mod:`runner.airflow.options`); every argument may be a template (``"{{ params.x }}"``).

* :class:`RunnerSplitOperator` checks everything that can be checked before a model call
  (the task, the options, the input's columns, ids and format, the output name), counts the
  input's rows the way ``runner batch`` reads them, and returns one row range per shard
  (:class:`~runner.airflow.plan.ShardSpec`). A bad value fails it without retries.
* :class:`RunnerShardOperator` is mapped over those ranges. It runs the batch over its rows
  of the input, resuming its own journal (the same for every try until one succeeds, in the
  shared store, so on any worker), so a retried shard pays for no finished row again; try *n* gives each row
  up to ``n * max_attempts`` attempts, so rows whose attempts an earlier try used up run
  again. Its model calls reserve in the fan-out's shared cap scope (its batch caps, held
  across every shard: see :mod:`runner.caps.shared`).
* :class:`RunnerMergeOperator` writes one output record per input row (the input's row
  numbers and ids) and the batch report of :mod:`runner.batch.summary`, from the shard
  journals, with the cap ledger's figures; a missing shard result, journal, output or row
  fails it.

Clearing: a retry after a failed try resumes, paying for nothing twice; a try after a
*successful* one (the task cleared after it succeeded) computes again, as that task's next
generation (:mod:`runner.airflow.generations`). Clearing the whole fan-out computes every
shard again in a new journal (the split's next generation gives it fresh shared caps);
clearing one shard and the merge computes that shard again and merges it with the others'
last results; clearing only the merge merges again and computes nothing: the merge reads the
journal of the generation each shard's result names. To resume a failed dag run, clear only
its failed tasks (``airflow tasks clear --only-failed``): clearing its successful tasks too
computes them again.

Where the state lives: see :mod:`runner.airflow.store` (the PostgreSQL store) and
:mod:`runner.airflow.plan` (the work directory, a shared path or a URL).

Row-failure policy: a shard fails its try (and Airflow retries it) while some of its rows
failed in a way another try may fix (a retryable error whose attempts are used up, rows not
started); on its last try it succeeds and leaves them to the merge. Rows no retry can fix
(invalid input, a final error such as ``auth``, a cap) never fail a shard, and a shard a cap
stopped (a batch cap, or a budget over time: every try would be refused until its window
reopens) is not retried. The merge writes the output and report first, then fails without
retries when more than ``max_failed_rows`` rows (default 0) are not ``done``; its message
gives the counts by error kind, with example row ids, and the cap that stopped the rows
(for a budget, when its window reopens).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from runner.airflow._compat import AirflowException, AirflowFailException
from runner.airflow.assets import annotate_outlets
from runner.airflow.execution import run_batch_for_airflow
from runner.airflow.links import RunnerReportLink
from runner.airflow.operator import dag_run_identity, fail_without_retry, model_credentials, resolve_root
from runner.airflow.options import check_option_names, literal_options, options_mapping, typed_options
from runner.airflow.plan import FanoutPlan, ShardSpec, run_work_dir
from runner.airflow.provider import DEFAULT_CONN_ID
from runner.config.typed_values import optional_int, optional_text, required_text
from runner.locations import Location

if TYPE_CHECKING:
    from airflow.sdk import Context

MAX_SHARDS = 10_000


class _FanoutStep(BaseOperator):
    """What the split, shard and merge tasks of one fan-out share: the arguments of its plan.

    Args:
        task: The task's name in the project.
        input_path: The CSV, JSONL or Parquet file of rows, relative to the project root.
        options: ``runner batch`` options by flag name: a mapping, or one template rendered to a mapping or its JSON.
        root: The project folder; default ``$RUNNER_ROOT``.
        work_dir: The folder of the shards' journals and outputs; default ``$RUNNER_AIRFLOW_WORK_DIR``.
        fanout_id: Names this fan-out's work among others of the same DAG run (``batch_fanout``'s ``prefix``).
        store_conn_id: A postgres connection for the shared store and cap ledger; default ``$RUNNER_STORE_CONN_ID``.
    """

    template_fields: Sequence[str] = ("task", "input_path", "options", "root", "work_dir", "store_conn_id")
    operator_extra_links = (RunnerReportLink(),)  # the shard's batch report, the merged report (none for the split)

    def __init__(
        self,
        *,
        task: str,
        input_path: str,
        options: Mapping[str, Any] | str | None = None,
        root: str | None = None,
        work_dir: str | None = None,
        fanout_id: str = "fanout",
        store_conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.task = task
        self.input_path = input_path
        self.options = literal_options(options)  # a mapping's names checked now, a template's once rendered
        self.last_manifest: dict[str, Any] | None = None  # this try's, for the report link
        self.root = root
        self.work_dir = work_dir
        self.fanout_id = fanout_id
        self.store_conn_id = store_conn_id

    def plan(self, context: Context) -> FanoutPlan:
        """The fan-out's plan from the rendered arguments (a bad value raises a runner UsageError)."""
        from runner.airflow.plan import run_key
        from runner.airflow.store import shared_store_url

        dag_id, dag_run_id, _, _ = dag_run_identity(context)
        root = Path(resolve_root(self.root))
        return FanoutPlan(
            task=required_text(self.task, "task"),
            root=root,
            input_path=root / required_text(self.input_path, "input_path"),
            work=run_work_dir(optional_text(self.work_dir, "work_dir"), dag_id, dag_run_id, self.fanout_id),
            options=typed_options(options_mapping(self.options)),
            key=run_key(dag_id, dag_run_id, self.fanout_id),
            store_url=shared_store_url(optional_text(self.store_conn_id, "store_conn_id")),
        )


class RunnerSplitOperator(_FanoutStep):
    """Check the fan-out's arguments and input, count its rows, return one row range per shard.

    Args:
        num_shards: How many shards (mapped tasks) to make; give this or ``shard_size``.
        shard_size: Rows per shard; give this or ``num_shards``.
        output_path: The merged output file (checked before any shard runs).
        strict_conf: Refuse dag run conf keys that are not DAG params (a typo).
    """

    template_fields: Sequence[str] = (*_FanoutStep.template_fields, "num_shards", "shard_size", "output_path")

    def __init__(
        self,
        *,
        num_shards: int | str | None = None,
        shard_size: int | str | None = None,
        output_path: str | None = None,
        strict_conf: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.num_shards = num_shards
        self.shard_size = shard_size
        self.output_path = output_path
        self.strict_conf = strict_conf

    def execute(self, context: Context) -> list[dict[str, Any]]:
        from runner.airflow.generations import current_generation, record_success
        from runner.airflow.plan import count_input_rows, plan_shards

        with fail_without_retry("runner batch fan-out"):
            if self.strict_conf:
                _check_conf_keys(context)
            plan = self.plan(context)
            num = optional_int(self.num_shards, "num_shards", minimum=1, maximum=MAX_SHARDS)
            size = optional_int(self.shard_size, "shard_size", minimum=1)
            project, spec = plan.load()
            plan.check_merged_output(plan.merged_output_path(optional_text(self.output_path, "output_path")))
            total, sha256 = count_input_rows(project, spec, plan)
            generation = current_generation(plan.successes())  # the fan-out cleared after a success: fresh caps
            shards = [replace(s, split_generation=generation.number)
                      for s in plan_shards(total, sha256, num_shards=num, shard_size=size)]  # fmt: skip
            _open_shared_caps(plan, shards)  # before any shard: a store that cannot be reached fails here
            record_success(plan.successes(), generation, context["ti"].try_number, {})
        self.log.info(
            "%s: %d row(s) in %d shard(s); work directory %s; the fan-out's computation %d", plan.input_path, total,
            len(shards), plan.work, generation.number,
        )  # fmt: skip
        return [shard.as_xcom() for shard in shards]


class RunnerShardOperator(_FanoutStep):
    """Run (resuming, or after a success again) the batch over one shard's rows; map it over the split's output.

    Args:
        shard: One row range from the split task (``expand(shard=split.output)``).
        conn_id: The ``runner_model`` connection holding the endpoint and API key.
        store_path: A SQLite run store file instead of the project's.
    """

    template_fields: Sequence[str] = (*_FanoutStep.template_fields, "shard", "conn_id", "store_path")

    def __init__(
        self,
        *,
        shard: Any,
        conn_id: str | None = DEFAULT_CONN_ID,
        store_path: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.shard = shard
        self.conn_id = conn_id
        self.store_path = store_path

    def execute(self, context: Context) -> dict[str, Any]:
        from runner.airflow.generations import current_generation, record_success
        from runner.batch.inputs import file_sha256
        from runner.errors import UsageError

        ti = context["ti"]
        with fail_without_retry(f"runner batch {self.task!r}"):
            plan, shard = self.plan(context), ShardSpec.from_xcom(self.shard)
            if file_sha256(plan.input_path) != shard.input_sha256:
                raise UsageError(f"{plan.input_path} changed since the split task read it; trigger a new dag run")
            generation = current_generation(plan.successes(shard))  # cleared after a success: a new journal
            plan = plan.for_generation(generation.number)
            base_url, api_key = model_credentials(self.conn_id)
            store = optional_text(self.store_path, "store_path")
            request = plan.request(
                shard, try_number=generation.try_here(ti.try_number), model_base_url=base_url, api_key=api_key,
                store_path=Path(store) if store else None,
            )  # fmt: skip
            manifest = run_batch_for_airflow(
                plan.task, root=plan.root, request=request, trace_carrier=getattr(ti, "context_carrier", None)
            )
        manifest = {"shard": shard.name, "index": shard.index, "rows": [shard.first_row, shard.last_row],
                    "try_number": ti.try_number, "generation": generation.number, **manifest}  # fmt: skip
        self.last_manifest = manifest
        self.log.info(
            "%s: %s done, %s failed, %s invalid, %s not run; %.6f USD; output %s",
            shard.describe(), manifest["done"], manifest["failed"], manifest["invalid"], manifest["skipped"],
            manifest["cost_usd"], manifest["output_path"],
        )  # fmt: skip
        if manifest["done"] < shard.rows:
            self._rows_not_done(context, shard, plan, manifest)
        record_success(plan.successes(shard), generation, ti.try_number, manifest)  # the merge merges this generation
        return manifest

    def on_kill(self) -> None:
        """Killed while running: stop the shard's batch as Ctrl-C does (rows in flight are
        journalled interrupted, their reservations settled); the next try resumes the journal."""
        from runner.airflow.deadline import cancel_the_running_run

        if cancel_the_running_run():
            self.log.warning("runner batch %r shard killed: its batch is cancelled; the next try resumes it", self.task)

    def _rows_not_done(self, context: Context, shard: ShardSpec, plan: FanoutPlan, manifest: dict[str, Any]) -> None:
        """Fail this try while another may finish rows; on the last try leave them to the merge."""
        from runner.airflow.failures import RowsLeft, cap_stop, rows_failure

        left = RowsLeft(shard.rows, manifest["done"], manifest["failed"], manifest["invalid"], manifest["skipped"],
                        manifest["retryable"])  # fmt: skip
        stopped = cap_stop(manifest)  # a cap (a budget over time too) refuses another try alike
        message = f"{shard.describe()}: " + rows_failure(read_batch_report(plan.report_dir(shard)), left) + stopped
        ti = context["ti"]
        if left.retryable and not stopped and ti.try_number <= getattr(ti, "max_tries", self.retries or 0):
            ti.xcom_push(key="manifest", value=manifest)
            raise AirflowException(
                f"{message}. {left.retryable} of them may succeed on another try: the retry resumes this shard "
                f"and gives them up to {plan.options['max_attempts']} more attempt(s) each"
            )
        self.log.warning("%s. No further try can finish them; the merge applies max_failed_rows", message)


class RunnerMergeOperator(_FanoutStep):
    """Write the merged output and batch report from the shard journals; fail on missing or failed rows.

    Args:
        shards: The split task's row ranges (its XCom).
        shard_results: The shard tasks' manifests (their XCom, read in one request).
        output_path: The merged output file (a path or URL); default one in the work directory.
        report_dir: Where the merged batch report goes.
        max_failed_rows: Failed rows tolerated in the whole fan-out before the merge fails (default 0).
    """

    template_fields: Sequence[str] = (
        *_FanoutStep.template_fields, "shards", "shard_results", "output_path", "report_dir", "max_failed_rows",
    )  # fmt: skip

    def __init__(
        self,
        *,
        shards: Any,
        shard_results: Any,
        output_path: str | None = None,
        report_dir: str | None = None,
        max_failed_rows: int | str | None = 0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.shards = shards
        self.shard_results = shard_results
        self.output_path = output_path
        self.report_dir = report_dir
        self.max_failed_rows = max_failed_rows

    def execute(self, context: Context) -> dict[str, Any]:
        from runner.airflow.failures import cap_stop, rows_failure
        from runner.airflow.merge import ShardOutputMissing, merge_fanout

        with fail_without_retry("runner batch fan-out merge"):
            plan = self.plan(context)
            allowed = optional_int(self.max_failed_rows, "max_failed_rows", minimum=0) or 0
            shards = [ShardSpec.from_xcom(s) for s in _items(self.shards)]
            results = {int(r["index"]): r for r in _items(self.shard_results) if isinstance(r, Mapping)}
            project, spec = plan.load()
            split_generation = shards[0].split_generation if shards else 1
            batch_id = f"{self.fanout_id}-{plan.work.parent.name}" + (f"-g{split_generation}" if split_generation > 1 else "")
            try:
                manifest, left, report = merge_fanout(
                    project, spec, plan, shards, results, batch_id=batch_id,
                    output_path=plan.merged_output_path(optional_text(self.output_path, "output_path")),
                    report_dir=plan.merged_report_dir(optional_text(self.report_dir, "report_dir")),
                )  # fmt: skip
            except ShardOutputMissing as exc:
                raise AirflowFailException(f"{exc}\nClear the failed shard task(s) to run them again.") from exc
        self.log.info(
            "merged %d shard(s): %d row(s), %d done; %.6f USD; output %s; report %s",
            manifest["shards"], manifest["total"], manifest["done"], manifest["cost_usd"],
            manifest["output_path"], manifest["report_path"],
        )  # fmt: skip
        self.last_manifest = manifest
        if left.not_done > allowed:
            context["ti"].xcom_push(key="manifest", value=manifest)
            raise AirflowFailException(
                f"{rows_failure(report, left)}{cap_stop(report.get('run'))}. That is more than "
                f"max_failed_rows={allowed}; every row is in "
                f"{manifest['output_path']} and the report {manifest['report_path']}"
            )
        annotate_outlets(context, self.outlets, manifest)
        return manifest


def batch_fanout(
    *,
    task: str,
    input_path: str,
    num_shards: int | str | None = None,
    shard_size: int | str | None = None,
    work_dir: str | None = None,
    root: str | None = None,
    conn_id: str | None = DEFAULT_CONN_ID,
    output_path: str | None = None,
    report_dir: str | None = None,
    max_failed_rows: int | str | None = 0,
    store_path: str | None = None,
    store_conn_id: str | None = None,
    prefix: str = "",
    pool: str | None = None,
    retries: int | None = None,
    strict_conf: bool = False,
    outlets: Sequence[Any] = (),
    options: Mapping[str, Any] | str | None = None,
    **more_options: Any,
) -> RunnerMergeOperator:
    """Add split -> mapped shards -> merge to the current DAG; returns the merge task.

    The other keywords are ``runner batch``'s options by flag name (:data:`runner.airflow.options.OPTION_NAMES`);
    or all of them in ``options``.

    Args:
        task: The task's name in the project.
        input_path: The CSV, JSONL or Parquet file of rows, relative to the project root.
        num_shards: How many shards (mapped tasks); give this or ``shard_size``.
        shard_size: Rows per shard; give this or ``num_shards``.
        work_dir: The folder of the shards' journals and outputs; default ``$RUNNER_AIRFLOW_WORK_DIR``.
        root: The project folder; default ``$RUNNER_ROOT``.
        conn_id: The ``runner_model`` connection holding the endpoint and API key.
        output_path: The merged output file (a path or URL).
        report_dir: Where the merged batch report goes.
        max_failed_rows: Failed rows tolerated in the whole fan-out before the merge fails (default 0).
        store_path: A SQLite run store file instead of the project's (one machine only).
        store_conn_id: The postgres connection of the shared store (default ``$RUNNER_STORE_CONN_ID``, then ``$RUNNER_STORE_URL``; see :mod:`runner.airflow.store`).
        prefix: Prefix of the three tasks' ids, and this fan-out's name in the work directory.
        pool: The Airflow pool of the shard tasks.
        retries: Retries of the shard tasks (default the DAG's).
        strict_conf: The split refuses dag run conf keys that are not DAG params (a typo).
        outlets: Assets (see :mod:`runner.airflow.assets`) of the merge task: updated when the merged output and report are written.
        options: ``runner batch`` options: a mapping, or one template (``options="{{ params.options }}"``) rendered to a mapping or its JSON, checked when the tasks run.
        more_options: Any batch option by name, as a keyword (``concurrency=4``): the options ``options`` takes.
    """
    from runner.errors import UsageError

    if isinstance(options, str):  # one template for all of them, checked once rendered
        if more_options:
            raise UsageError(f"batch_fanout: options={options!r} is a template; give the other options "
                             f"({', '.join(more_options)}) in it too, not as keywords")  # fmt: skip
        given: Mapping[str, Any] | str = options
    else:
        given = {**(options or {}), **more_options}
        check_option_names(given, "batch_fanout")
    common = {"task": task, "input_path": input_path, "options": given, "root": root, "work_dir": work_dir,
              "fanout_id": prefix.rstrip("_-.") or "fanout", "store_conn_id": store_conn_id}  # fmt: skip
    split = RunnerSplitOperator(
        task_id=f"{prefix}split", num_shards=num_shards, shard_size=shard_size, output_path=output_path,
        strict_conf=strict_conf, **common,
    )  # fmt: skip
    shard_kwargs: dict[str, Any] = {"pool": pool} if pool else {}
    if retries is not None:
        shard_kwargs["retries"] = retries
    shards = RunnerShardOperator.partial(
        task_id=f"{prefix}run_shard", conn_id=conn_id, store_path=store_path, **common, **shard_kwargs
    ).expand(shard=split.output)
    return RunnerMergeOperator(
        task_id=f"{prefix}merge", shards=split.output, shard_results=shards.output, output_path=output_path,
        report_dir=report_dir, max_failed_rows=max_failed_rows, trigger_rule="none_failed", outlets=list(outlets),
        **common,
    )  # fmt: skip


def _check_conf_keys(context: Context) -> None:
    from runner.errors import UsageError, did_you_mean

    params = set(context["params"].keys()) if context.get("params") else set()
    dag = getattr(context.get("dag"), "params", None)
    declared = set(dag.keys()) if dag is not None else params
    conf = getattr(context.get("dag_run"), "conf", None) or {}
    for key in conf:
        if key not in declared:
            raise UsageError(
                f"dag run conf: unknown key '{key}'{did_you_mean(str(key), declared)} (params: {', '.join(sorted(declared))})"
            )


def _items(value: Any) -> list[Any]:
    """A rendered XCom list (or one item, or nothing) as a list.

    Under a real scheduler a mapped task's output renders as Airflow's lazy XCom sequence,
    whose iteration asks the API server for one shard's value at a time (a request per shard,
    10,000 for the largest fan-out); a whole slice is one request."""
    if value is None:
        return []
    if isinstance(value, Mapping) or not isinstance(value, Iterable) or isinstance(value, str):
        return [value]
    if isinstance(value, Sequence):
        return list(value[:])
    return list(value)


def _open_shared_caps(plan: FanoutPlan, shards: Sequence[ShardSpec]) -> None:
    """Create the fan-out's shared cap scope (its batch caps, held across every shard)."""
    from runner.batch.file_batch import open_shared_ledger

    if shards:
        ledger = open_shared_ledger(plan.request(shards[0]))
        if ledger is not None:
            ledger.db.close()


def read_batch_report(report_dir: Location) -> dict[str, Any]:
    """A shard's ``batch_report.json`` (empty if it could not be read: the counts still tell the story)."""
    import json

    try:
        loaded = json.loads((report_dir / "batch_report.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return loaded if isinstance(loaded, dict) else {}
