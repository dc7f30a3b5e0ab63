"""The thin adapter between Airflow tasks and :mod:`runner.api`. No Airflow imports here.

Two rules an Airflow task must keep, enforced here so every operator gets them:

* **Deterministic run ids.** A task instance's runner run id is derived from the Airflow
  ``dag_id``, the dag run's ``run_id``, the ``task_id``, the ``map_index`` and a hash of the
  task name and inputs -- never from ``try_number``. A retry therefore resumes the *same*
  runner run, and the run store does not re-pay steps that already completed.
* **A clear after a success recomputes.** When the run of that id already *finished* (the
  run store says ``completed``, every delivery made: the try before succeeded), the new try
  is a request to run again, not a retry: it starts the next *generation* of the run id
  (``<id>-g2``, ``-g3``, ...), a new run that resumes nothing. The decision is the run
  store's record of the run, never the try number or a message.
* **Small, secret-free XCom values.** Only a short manifest goes back to Airflow; never the API
  key, never the run's output (which can be large): that stays in the run store and report.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import hashlib
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from runner.airflow.deadline import timeouts_cancel_the_run
from runner.airflow.failures import RowsLeft, rows_left, short
from runner.tracing import flushed, joined

if TYPE_CHECKING:
    from runner.batch.request import BatchRequest
    from runner.config.project import Project
    from runner.config.specs import TaskSpec
    from runner.core.ports import EventSink

T = TypeVar("T")

RUN_ID_PREFIX = "af"
TASK_MANIFEST_KEYS = ("run_id", "status", "cost_usd", "report_path", "exit_code", "error_kind", "error")
BATCH_MANIFEST_KEYS = (
    "batch_id", "counts", "total", "done", "failed", "invalid", "skipped", "cost_usd", "input_tokens", "output_tokens",
    "elapsed_seconds", "stop_reason", "stop_kind", "exit_code", "output_path", "report_path", "retryable",
)  # fmt: skip
_SLUG = re.compile(r"[^A-Za-z0-9_.-]+")


def canonical_json(value: Any) -> str:
    """JSON with sorted keys and no whitespace; non-JSON values (dates, paths) as ``str``."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str, ensure_ascii=False)


def inputs_digest(inputs: Mapping[str, Any] | None) -> str:
    return hashlib.sha256(canonical_json(dict(inputs or {})).encode()).hexdigest()


def _slug(text: str, limit: int) -> str:
    stem = Path(text).stem if Path(text).suffix in (".yaml", ".yml") else text
    return (_SLUG.sub("-", stem).strip("-.") or "task")[:limit]


def derive_run_id(
    *,
    task: str,
    dag_id: str,
    dag_run_id: str,
    task_id: str,
    map_index: int | None,
    inputs: Mapping[str, Any] | None,
    generation: int = 1,
) -> str:
    """``<task>-af-<24 hex>``: the same for every try of one task instance with the same inputs;
    ``-g<n>`` added for the n-th generation (the n-1-th clear after a success, see the module doc).

    The digest covers dag_id, the dag run's run_id, task_id, map_index, the task reference and
    the inputs' canonical JSON. try_number is deliberately not part of it.
    """
    identity = {
        "dag_id": dag_id,
        "dag_run_id": dag_run_id,
        "task_id": task_id,
        "map_index": -1 if map_index is None else int(map_index),
        "task": task,
        "inputs": inputs_digest(inputs),
    }
    digest = hashlib.sha256(canonical_json(identity).encode()).hexdigest()[:24]
    base = f"{_slug(task, 40)}-{RUN_ID_PREFIX}-{digest}"
    return base if generation <= 1 else f"{base}-g{generation}"


MAX_GENERATIONS = 10_000


def current_run_id(finished: Callable[[str], bool], **identity: Any) -> str:
    """The run id this try runs under: the first generation of :func:`derive_run_id` whose run
    has not ``finished`` (absent, failed, capped, running, or a delivery still to make)."""
    for generation in range(1, MAX_GENERATIONS + 1):
        run_id = derive_run_id(**identity, generation=generation)
        if not finished(run_id):
            return run_id
    raise RuntimeError(f"{MAX_GENERATIONS} finished runs for one task instance")  # pragma: no cover - cleared 10,000 times


def call_blocking(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """Call a blocking API that may use ``asyncio.run``, even from inside a running event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        with timeouts_cancel_the_run():  # an execution_timeout cancels the run cleanly (see runner.airflow.deadline)
            return fn(*args, **kwargs)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="runner-airflow") as pool:
        context = contextvars.copy_context()  # the caller's trace context goes along
        return pool.submit(context.run, fn, *args, **kwargs).result()


def _optional_path(value: str | Path | None) -> Path | None:
    return Path(value) if value not in (None, "") else None


def task_manifest(manifest: Mapping[str, Any], secrets: Iterable[str | None] = ()) -> dict[str, Any]:
    """The XCom value for one run: ``{run_id, status, cost_usd, report_path, exit_code, error_kind, error}``.

    ``error`` is the run's error message, redacted (``secrets`` and credential shapes) and
    shortened; ``None`` for a completed run. The run's output is never part of it.
    """
    report = manifest.get("report_path") or manifest.get("report_dir")
    error = manifest.get("error")
    return {
        "run_id": str(manifest.get("run_id")),
        "status": str(manifest.get("status")),
        "cost_usd": float(manifest.get("cost_usd") or 0.0),
        "report_path": str(report) if report else None,
        "exit_code": int(exit_code) if (exit_code := manifest.get("exit_code")) is not None else 1,
        "error_kind": manifest.get("error_kind"),
        "error": short(error, secrets) if error else None,
    }


def batch_manifest(summary: Mapping[str, Any], left: RowsLeft) -> dict[str, Any]:
    """The XCom value for one batch (shard): counts, spend, why it stopped, paths; no row data."""
    counts = dict(summary.get("counts") or {})
    values = {
        **summary,
        "done": left.done,
        "failed": left.failed,
        "invalid": left.invalid,
        "skipped": left.not_run,
        "retryable": left.retryable,
        "counts": counts,
    }
    return {key: values.get(key) for key in BATCH_MANIFEST_KEYS}


def run_task_for_airflow(
    task: str,
    *,
    root: str | Path,
    inputs: Mapping[str, Any] | None,
    dag_id: str,
    dag_run_id: str,
    task_id: str,
    map_index: int | None = -1,
    caps: Mapping[str, Any] | None = None,
    store_path: str | Path | None = None,
    reports_dir: str | Path | None = None,
    model_base_url: str | None = None,
    api_key: str | None = None,
    run_id: str | None = None,
    store_url: str | None = None,
    trace_carrier: Mapping[str, str] | None = None,
    source_urls: Mapping[str, str] | None = None,
    events: EventSink | None = None,
) -> dict[str, Any]:
    """Run (or resume) one runner task for one Airflow task instance; return the small manifest.

    ``run_id`` defaults to :func:`derive_run_id`. ``store_url`` (PostgreSQL) is the run store
    every worker shares, so a retry on another worker resumes the run; ``reports_dir`` may
    be a URL (``s3://bucket/reports``). Raises what :func:`runner.api.run_task` raises
    for invalid configuration or inputs (nothing is spent then); a run that started returns a
    manifest whatever its status -- the operator decides whether that status fails the task.
    """
    from runner.api import run_finished, run_task  # the lead's API; imported late so this module loads without it
    from runner.config.matplotlib_dir import keep_matplotlib_cache

    keep_matplotlib_cache()  # a worker user without a home would rebuild matplotlib's font cache in every task
    inputs = dict(inputs or {})
    if not run_id:
        def finished(candidate: str) -> bool:
            return run_finished(candidate, root=Path(root), store_path=_optional_path(store_path), store_url=store_url or None)

        run_id = current_run_id(
            finished, task=task, dag_id=dag_id, dag_run_id=dag_run_id, task_id=task_id, map_index=map_index, inputs=inputs
        )  # fmt: skip
    with joined(trace_carrier), flushed():
        manifest = call_blocking(
            run_task,
            task,
            root=Path(root),
            inputs=inputs,
            run_id=run_id,
            caps=dict(caps) if caps else None,
            store_path=_optional_path(store_path),
            store_url=store_url or None,
            reports_dir=reports_dir or None,
            model_base_url=model_base_url or None,
            api_key=api_key or None,
            source_urls=dict(source_urls or {}),
            events=events,
        )
    return task_manifest(manifest, [api_key, *(source_urls or {}).values()])


def run_batch_for_airflow(
    task: str, *, root: str | Path, request: BatchRequest, trace_carrier: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """Run (always resuming) the batch ``request``; return its manifest (:func:`batch_manifest`).

    Raises what the batch raises for invalid configuration, inputs or flags (before any row
    runs); a batch that started returns a manifest whatever happened to its rows.
    """
    from runner.config.project import load_project_or_raise

    project = load_project_or_raise(Path(root))
    return batch_step_for_airflow(project, project.task_for(task), request, trace_carrier).manifest


@dataclass(frozen=True)
class BatchStep:
    """What one call of a batch left: its manifest, its rows by outcome, the provider batches
    still out (``runner batch --via batch-api`` without waiting) and the batch's age."""

    manifest: dict[str, Any]
    left: RowsLeft
    pending: tuple[str, ...]
    age_seconds: float


def batch_step_for_airflow(
    project: Project, spec: TaskSpec, request: BatchRequest, trace_carrier: Mapping[str, str] | None = None
) -> BatchStep:
    """Run (always resuming) the batch ``request`` once: to its end, or, with
    ``request.provider_wait=False``, until its provider batch is out (see :class:`BatchStep`)."""
    from runner.batch.file_batch import open_journal, run_batch_file
    from runner.config.matplotlib_dir import keep_matplotlib_cache

    keep_matplotlib_cache()
    with joined(trace_carrier), flushed():
        summary = call_blocking(lambda: asyncio.run(run_batch_file(project, spec, request)))
    journal, _ = open_journal(project, spec, request)
    with journal:
        left, age = rows_left(journal), journal.age_seconds()
    pending = tuple(str(p) for p in summary.get("provider_pending") or ())
    return BatchStep(batch_manifest(summary, left), left, pending, age)
