"""Fan a batch out over Airflow workers: split -> one mapped batch per shard -> merge.

::

    from runner.airflow.fanout import batch_fanout

    with DAG("classify_tickets", schedule=None, ...):
        batch_fanout(task="classify", input_path="/shared/in/tickets.csv", num_shards=8,
                     work_dir="/shared/runner-airflow", root="/srv/project", retries=2)

* :class:`RunnerSplitOperator` splits the input (CSV, JSONL or Parquet) into contiguous shard
  files under the dag run's work directory on a path every worker can read, each written
  atomically; it returns the shard paths (a short list) for mapping.
* :class:`RunnerShardOperator` is mapped over those paths (``.partial(...).expand(shard_path=...)``)
  and runs :func:`runner.api.run_batch` on one shard with ``resume=True`` and a journal whose
  path depends on the dag run, task and map index but not the try, so a retried shard skips
  the rows it already finished and re-pays none of them. (Rows the batch itself gave up on --
  a permanent error, or retryable ones whose attempts are used up -- stay failed on resume:
  that is the batch journal's policy; ``max_failed_rows`` only decides whether they fail the task.)
* :class:`RunnerMergeOperator` concatenates the shard outputs in shard order into one file and
  writes a batch report (JSON + Markdown) with per-shard and total counts and cost.

All three compute the same work directory, ``<work_dir>/<dag_id>/<hash of the dag run id>``.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from airflow.sdk import BaseOperator

from runner.airflow._compat import AirflowException, AirflowFailException
from runner.airflow.execution import derive_journal_path, run_batch_for_airflow
from runner.airflow.operator import dag_run_identity, model_credentials, resolve_root
from runner.airflow.provider import DEFAULT_CONN_ID
from runner.airflow.shards import merge_files, split_file, write_batch_report

if TYPE_CHECKING:
    from airflow.sdk import Context

WORK_DIR_ENV = "RUNNER_AIRFLOW_WORK_DIR"
DEFAULT_WORK_DIR = "/tmp/runner-airflow"


def run_work_dir(work_dir: str | os.PathLike[str] | None, dag_id: str, dag_run_id: str) -> Path:
    """The dag run's shared directory: ``<work_dir>/<dag_id>/<16 hex of the run id>``."""
    base = str(work_dir) if work_dir not in (None, "") else os.environ.get(WORK_DIR_ENV, DEFAULT_WORK_DIR)
    return Path(base) / dag_id / hashlib.sha256(dag_run_id.encode()).hexdigest()[:16]


def _context_work_dir(work_dir: str | None, context: Context) -> Path:
    dag_id, dag_run_id, _, _ = dag_run_identity(context)
    return run_work_dir(work_dir, dag_id, dag_run_id)


class RunnerSplitOperator(BaseOperator):
    """Split ``input_path`` into shards under the run's work dir; return their paths."""

    template_fields: Sequence[str] = ("input_path", "work_dir", "num_shards", "shard_size")

    def __init__(
        self,
        *,
        input_path: str,
        work_dir: str | None = None,
        num_shards: int | str | None = None,
        shard_size: int | str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.input_path = input_path
        self.work_dir = work_dir
        self.num_shards = num_shards
        self.shard_size = shard_size

    def execute(self, context: Context) -> list[str]:
        shard_dir = _context_work_dir(self.work_dir, context) / "shards"
        num = int(self.num_shards) if self.num_shards not in (None, "") else None
        size = int(self.shard_size) if self.shard_size not in (None, "") else None
        if num is None and size is None:
            num = 4
        paths = split_file(self.input_path, shard_dir, num_shards=num, shard_size=size)
        self.log.info("split %s into %d shard(s) in %s", self.input_path, len(paths), shard_dir)
        return paths


class RunnerShardOperator(BaseOperator):
    """Run (resuming) the runner batch ``task`` over one shard file; map it over the shards."""

    template_fields: Sequence[str] = ("task", "shard_path", "work_dir", "caps", "root", "conn_id", "concurrency")
    template_fields_renderers: ClassVar[dict[str, str]] = {"caps": "json"}

    def __init__(
        self,
        *,
        task: str,
        shard_path: str,
        work_dir: str | None = None,
        root: str | None = None,
        caps: dict[str, Any] | None = None,
        concurrency: int | str = 4,
        output_suffix: str = ".jsonl",
        conn_id: str | None = DEFAULT_CONN_ID,
        max_failed_rows: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.task = task
        self.shard_path = shard_path
        self.work_dir = work_dir
        self.root = root
        self.caps = caps
        self.concurrency = concurrency
        self.output_suffix = output_suffix
        self.conn_id = conn_id
        self.max_failed_rows = max_failed_rows

    def execute(self, context: Context) -> dict[str, Any]:
        from runner.errors import ConfigError, InputError, UsageError

        dag_id, dag_run_id, task_id, map_index = dag_run_identity(context)
        work = run_work_dir(self.work_dir, dag_id, dag_run_id)
        shard = Path(self.shard_path)
        output_path = work / "outputs" / (shard.name.removesuffix(shard.suffix) + self.output_suffix)
        journal = derive_journal_path(work, dag_id=dag_id, dag_run_id=dag_run_id, task_id=task_id, map_index=map_index)
        journal.parent.mkdir(parents=True, exist_ok=True)
        output_path.parent.mkdir(parents=True, exist_ok=True)
        base_url, api_key = model_credentials(self.conn_id)
        try:
            manifest = run_batch_for_airflow(
                self.task,
                root=resolve_root(self.root),
                input_path=shard,
                output_path=output_path,
                journal_path=journal,
                concurrency=int(self.concurrency),
                caps=dict(self.caps) if self.caps else None,
                model_base_url=base_url,
                api_key=api_key,
            )
        except (ConfigError, InputError, UsageError) as exc:
            raise AirflowFailException(f"runner batch {self.task!r} on {shard.name}: {exc}") from exc
        manifest = {"shard": str(shard), **manifest}
        self.log.info(
            "shard %s: %s/%s done, %s failed, %s skipped, %.6f USD",
            shard.name,
            manifest["done"],
            manifest["total"],
            manifest["failed"],
            manifest["skipped"],
            manifest["cost_usd"],
        )
        if self.max_failed_rows is not None and manifest["failed"] > self.max_failed_rows:
            context["ti"].xcom_push(key="manifest", value=manifest)
            raise AirflowException(
                f"shard {shard.name}: {manifest['failed']} failed row(s) > {self.max_failed_rows} "
                "(a retry resumes the shard: finished rows are not re-run)"
            )
        return manifest


class RunnerMergeOperator(BaseOperator):
    """Concatenate the shard outputs (in shard order) and write the batch report."""

    template_fields: Sequence[str] = ("shard_results", "work_dir", "output_path", "report_path")

    def __init__(
        self,
        *,
        shard_results: Any,
        work_dir: str | None = None,
        output_path: str | None = None,
        report_path: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.shard_results = shard_results
        self.work_dir = work_dir
        self.output_path = output_path
        self.report_path = report_path

    def execute(self, context: Context) -> dict[str, Any]:
        work = _context_work_dir(self.work_dir, context)
        manifests = _manifests(self.shard_results)
        output_path = Path(self.output_path) if self.output_path else work / "output.jsonl"
        report_path = Path(self.report_path) if self.report_path else work / "batch_report.json"
        parts = [m["output_path"] for m in manifests if m.get("output_path")]
        merged = merge_files(parts, output_path)
        summary = write_batch_report(report_path, manifests, merged)
        self.log.info(
            "merged %d shard output(s) into %s (%d records); report %s",
            merged["parts"],
            merged["output_path"],
            merged["records"],
            summary["report_path"],
        )
        return summary


def _manifests(results: Any) -> list[dict[str, Any]]:
    items: Iterable[Any] = [] if results is None else ([results] if isinstance(results, Mapping) else results)
    manifests = [dict(m) for m in items if m]
    return sorted(manifests, key=lambda m: str(m.get("shard", "")))


def batch_fanout(
    *,
    task: str,
    input_path: str,
    num_shards: int | str | None = None,
    shard_size: int | str | None = None,
    work_dir: str | None = None,
    root: str | None = None,
    caps: dict[str, Any] | None = None,
    concurrency: int | str = 4,
    conn_id: str | None = DEFAULT_CONN_ID,
    output_path: str | None = None,
    report_path: str | None = None,
    prefix: str = "",
    pool: str | None = None,
    retries: int | None = None,
    max_failed_rows: int | None = None,
) -> RunnerMergeOperator:
    """Add split -> mapped shards -> merge to the current DAG; returns the merge task."""
    split = RunnerSplitOperator(
        task_id=f"{prefix}split",
        input_path=input_path,
        work_dir=work_dir,
        num_shards=num_shards,
        shard_size=shard_size,
    )
    shard_kwargs: dict[str, Any] = {}
    if pool:
        shard_kwargs["pool"] = pool
    if retries is not None:
        shard_kwargs["retries"] = retries
    shards = RunnerShardOperator.partial(
        task_id=f"{prefix}run_shard",
        task=task,
        work_dir=work_dir,
        root=root,
        caps=caps,
        concurrency=concurrency,
        conn_id=conn_id,
        max_failed_rows=max_failed_rows,
        **shard_kwargs,
    ).expand(shard_path=split.output)
    return RunnerMergeOperator(
        task_id=f"{prefix}merge",
        shard_results=shards.output,
        work_dir=work_dir,
        output_path=output_path,
        report_path=report_path,
    )
