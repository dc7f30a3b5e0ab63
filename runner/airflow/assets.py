"""Airflow Assets for what runner tasks write, so downstream DAGs can be scheduled on them.

::

    from runner.airflow.assets import batch_output_asset, report_asset

    daily_reports = report_asset("daily_report")                 # <reports dir>/daily_report
    triaged = batch_output_asset("/shared/out/triage.jsonl")     # or "s3://bucket/out/triage.jsonl"

    RunnerTaskOperator(task_id="daily_report", task="daily_report", outlets=[daily_reports], ...)
    RunnerBatchOperator(task_id="triage", ..., output_path="/shared/out/triage.jsonl", outlets=[triaged])

    with DAG("publish", schedule=[daily_reports], ...): ...     # runs after each new report

An Asset is named by a URI fixed when the DAG is parsed, so these helpers take the place,
not a template. A runner operator that succeeds adds the run's (or batch's) manifest to the
asset event of each of its Asset outlets (``run_id`` or ``batch_id``, ``status``,
``report_path``, ``output_path``, ``cost_usd``): a downstream task reads it from
``triggering_asset_events``. A task that fails emits no asset event (Airflow's rule).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from airflow.sdk import Asset

EVENT_KEYS = ("run_id", "batch_id", "status", "exit_code", "report_path", "output_path", "cost_usd")


def _uri(place: str | os.PathLike[str]) -> str:
    text = os.fspath(place)
    if "://" in text:
        return text
    path = Path(os.path.expanduser(text))
    if not path.is_absolute():
        raise ValueError(f"{text!r}: an asset needs an absolute path or a URL (workers resolve relative paths differently)")
    return path.as_uri()


def report_asset(task: str, reports_dir: str | os.PathLike[str] | None = None, *, name: str | None = None) -> Asset:
    """The Asset of task ``task``'s reports: ``<reports_dir>/<task>`` (default ``$RUNNER_REPORTS_DIR``
    when the DAG is parsed), where every run of the task writes its report folder."""
    base = reports_dir if reports_dir not in (None, "") else os.environ.get("RUNNER_REPORTS_DIR", "")
    if not base:
        raise ValueError("report_asset needs reports_dir=... or $RUNNER_REPORTS_DIR (the reports folder every worker writes)")
    uri = _uri(base).rstrip("/") + "/" + task
    return Asset(uri=uri, name=name or f"runner-reports-{task}")


def batch_output_asset(output_path: str | os.PathLike[str], *, name: str | None = None) -> Asset:
    """The Asset of a batch's output file (give the operator the same ``output_path``)."""
    uri = _uri(output_path)
    return Asset(uri=uri, name=name or f"runner-output-{Path(uri.rsplit('/', 1)[-1]).stem}")


def annotate_outlets(context: Mapping[str, Any], outlets: Iterable[Any], manifest: Mapping[str, Any]) -> None:
    """Put the manifest's figures (:data:`EVENT_KEYS`) on the asset event of each Asset outlet."""
    events = context.get("outlet_events")
    if events is None:
        return
    extra = {key: manifest[key] for key in EVENT_KEYS if manifest.get(key) is not None}
    for outlet in outlets or ():
        if isinstance(outlet, Asset):
            events[outlet].extra.update(extra)
