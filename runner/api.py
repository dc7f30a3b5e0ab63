"""The Python API: the same runs the CLI makes, for embedding (Airflow, notebooks, tests).

Both functions block, take plain values and return small, secret-free manifests.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from runner.config.capvalues import coerce_caps
from runner.config.project import load_project_or_raise
from runner.core.ports import EventSink
from runner.locations import Location, location
from runner.runs.options import RunOptions


def run_task(
    task: str,
    *,
    root: Path,
    inputs: dict[str, Any] | None = None,
    run_id: str | None = None,
    caps: dict[str, Any] | None = None,
    store_path: Path | None = None,
    reports_dir: str | Path | Location | None = None,
    model: str | None = None,
    model_base_url: str | None = None,
    api_key: str | None = None,
    events: EventSink | None = None,
    store_url: str | None = None,
    source_urls: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Run ``task`` (a name or a YAML path) once; an existing ``run_id`` resumes that run.

    ``source_urls`` maps SQL source names to URLs the caller resolved (secrets included;
    the Airflow operator's, from connections).

    Returns ``{run_id, task, status, exit_code, cost_usd, report_dir, output, ...}``.
    Raises :class:`~runner.errors.ConfigError` / :class:`~runner.errors.InputError` /
    :class:`~runner.errors.UsageError` before anything is spent when the configuration, the
    inputs or the caps are invalid. ``caps`` values may be numbers or numeric strings
    (rendered Airflow templates); see :func:`runner.config.capvalues.coerce_caps`.
    ``store_url`` (``postgresql://...``, default ``$RUNNER_STORE_URL``) puts the run store in a
    database every worker shares; ``reports_dir`` may be a URL (``s3://bucket/reports``).
    """
    from runner.model.factory import check_endpoints
    from runner.runs.execute import execute_task

    project = load_project_or_raise(Path(root))
    spec = project.task_for(task)
    options = RunOptions(
        run_id=run_id,
        caps=coerce_caps(caps, source="caps"),
        store_path=store_path,
        store_url=store_url,
        reports_dir=location(reports_dir) if reports_dir is not None else None,
        model_override=model,
        base_url_override=model_base_url,
        api_key=api_key,
        events=events,
        source_urls=dict(source_urls or {}),
    )
    check_endpoints(project, spec, model_override=model, base_url_override=model_base_url, api_key=api_key)
    result = asyncio.run(execute_task(project, spec, dict(inputs or {}), options))
    manifest = result.manifest()
    manifest["output"] = result.output
    return manifest


def run_finished(
    run_id: str, *, root: Path, store_path: Path | None = None, store_url: str | None = None
) -> bool:
    """Whether run ``run_id`` is in the run store, ``completed``, with every report delivery made:
    resuming it would do nothing (the Airflow operator starts a new run for a try after such a
    run: a task cleared after it succeeded). A run not found, or ended otherwise, is not finished;
    nor is one in a store that does not exist yet or cannot be opened (the run then says why)."""
    import json

    from runner.errors import RunnerError
    from runner.runs.execute import default_store_path, open_run_store
    from runner.store.database import resolve_store

    try:  # only an existing store is read: the run itself creates one, after checking where it goes
        target = resolve_store(url=store_url, path=store_path, default=default_store_path(Path(root)))
        if isinstance(target, Path) and not target.is_file():
            return False
        store = open_run_store(Path(root), path=store_path, url=store_url)
    except RunnerError:  # a store that cannot be opened: the run says why, where it is checked
        return False
    try:
        row = store.run(run_id)
    finally:
        store.close()
    if row is None or row["status"] != "completed":
        return False
    try:
        deliveries = (json.loads(row["record_json"] or "{}") or {}).get("deliveries") or []
    except (ValueError, AttributeError):
        return True
    return all(isinstance(d, dict) and d.get("status") == "delivered" for d in deliveries)


def run_batch(
    task: str,
    *,
    root: Path,
    input_path: Path,
    output_path: str | Path | Location,
    resume: bool = True,
    journal_path: Path | None = None,
    store_path: Path | None = None,
    store_url: str | None = None,
    report_dir: str | Path | Location | None = None,
    model_base_url: str | None = None,
    api_key: str | None = None,
    progress: str = "none",
    **options: Any,
) -> dict[str, Any]:
    """Run ``task`` over every row of ``input_path``; rerunning resumes from the journal.

    ``options`` are the batch options (:data:`runner.batch.options.BATCH_OPTIONS`) by name:
    ``runner batch``'s flags without dashes (``id_column``, ``concurrency``, ``max_cost_usd``,
    ``limit``, ``keep_columns``, ``via``, ...), plus ``caps`` and ``row_caps`` (mappings of
    any cap names: the batch's caps and each row's); values may be native or text, and a bad
    or unknown one raises :class:`~runner.errors.UsageError` naming it. A journal started
    under another configuration raises :class:`~runner.errors.UsageError` (see
    ``resume=False`` and ``keep_answers``). Returns ``{batch_id, counts, total, cost_usd,
    output_path, report_path, exit_code, fingerprint, not_retried, notes, ...}``.
    """
    from runner.batch.file_batch import run_batch_file
    from runner.batch.options import BatchOptions
    from runner.batch.request import BatchRequest

    typed = BatchOptions.typed(options, "run_batch")
    project = load_project_or_raise(Path(root))
    spec = project.task_for(task)
    request = BatchRequest(
        input_path=Path(input_path), output_path=location(output_path), journal_path=journal_path, restart=not resume,
        report_dir=location(report_dir) if report_dir is not None else None, base_url_override=model_base_url,
        api_key=api_key, store_path=store_path, store_url=store_url, progress=progress,
        batch_limits=typed.batch_limits(spec.batch_api), **typed.request_fields(),
    )
    if request.mode(spec) == "live":
        typed.check_live()
    summary = asyncio.run(run_batch_file(project, spec, request))
    counts = summary["counts"]
    summary.update(done=counts.get("done", 0), failed=counts.get("failed", 0) + counts.get("invalid", 0),
                   skipped=counts.get("not_run", 0))
    return summary
