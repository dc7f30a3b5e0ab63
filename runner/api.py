"""The Python API: the same runs the CLI makes, for embedding (Airflow, notebooks, tests).

Both functions block, take plain values and return small, secret-free manifests.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from runner.config.project import load_project_or_raise
from runner.config.specs import Caps
from runner.runs.types import EventSink, RunOptions


def run_task(
    task: str,
    *,
    root: Path,
    inputs: dict[str, Any] | None = None,
    run_id: str | None = None,
    caps: dict[str, Any] | None = None,
    store_path: Path | None = None,
    reports_dir: Path | None = None,
    model: str | None = None,
    model_base_url: str | None = None,
    api_key: str | None = None,
    events: EventSink | None = None,
) -> dict[str, Any]:
    """Run ``task`` (a name or a YAML path) once; an existing ``run_id`` resumes that run.

    Returns ``{run_id, task, status, exit_code, cost_usd, report_dir, output, ...}``.
    Raises :class:`~runner.errors.ConfigError` / :class:`~runner.errors.InputError` before
    anything is spent when the configuration or the inputs are invalid.
    """
    from runner.runs.execute import execute_task

    project = load_project_or_raise(Path(root))
    spec = project.task_for(task)
    options = RunOptions(
        run_id=run_id,
        caps=Caps.from_dict(caps),
        store_path=store_path,
        reports_dir=reports_dir,
        model_override=model,
        base_url_override=model_base_url,
        api_key=api_key,
        events=events,
    )
    result = asyncio.run(execute_task(project, spec, dict(inputs or {}), options))
    manifest = result.manifest()
    manifest["output"] = result.output
    return manifest
