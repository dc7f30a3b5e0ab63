"""The thin adapter between Airflow tasks and :mod:`runner.api`. No Airflow imports here.

Two rules an Airflow task must keep, enforced here so every operator gets them:

* **Deterministic run ids.** A task instance's runner run id is derived from the Airflow
  ``dag_id``, the dag run's ``run_id``, the ``task_id``, the ``map_index`` and a hash of the
  task name and inputs -- never from ``try_number``. A retry therefore resumes the *same*
  runner run, and the run store does not re-pay steps that already completed.
* **Small, secret-free XCom values.** Only a short manifest goes back to Airflow; never the API
  key, never the run's output (which can be large): that stays in the run store and report.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import json
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

RUN_ID_PREFIX = "af"
TASK_MANIFEST_KEYS = ("run_id", "status", "cost_usd", "report_path", "exit_code")
BATCH_MANIFEST_KEYS = ("total", "done", "failed", "skipped", "cost_usd", "output_path", "report_path")
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
) -> str:
    """``<task>-af-<24 hex>``: the same for every try of one task instance with the same inputs.

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
    return f"{_slug(task, 40)}-{RUN_ID_PREFIX}-{digest}"


def derive_journal_path(
    work_dir: str | Path, *, dag_id: str, dag_run_id: str, task_id: str, map_index: int | None
) -> Path:
    """Where a mapped batch task keeps its resume journal: stable across tries, unique per instance."""
    identity = canonical_json({"dag_id": dag_id, "dag_run_id": dag_run_id, "task_id": task_id, "map_index": map_index})
    digest = hashlib.sha256(identity.encode()).hexdigest()[:16]
    index = "x" if map_index is None or int(map_index) < 0 else f"{int(map_index):05d}"
    return Path(work_dir) / "journals" / f"{_slug(task_id, 40)}-{index}-{digest}.sqlite3"


def call_blocking(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """Call a blocking API that may use ``asyncio.run``, even from inside a running event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return fn(*args, **kwargs)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="runner-airflow") as pool:
        return pool.submit(fn, *args, **kwargs).result()


def _optional_path(value: str | Path | None) -> Path | None:
    return Path(value) if value not in (None, "") else None


def task_manifest(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """The XCom value for one run: ``{run_id, status, cost_usd, report_path, exit_code}``."""
    report = manifest.get("report_path") or manifest.get("report_dir")
    return {
        "run_id": str(manifest.get("run_id")),
        "status": str(manifest.get("status")),
        "cost_usd": float(manifest.get("cost_usd") or 0.0),
        "report_path": str(report) if report else None,
        "exit_code": int(exit_code) if (exit_code := manifest.get("exit_code")) is not None else 1,
    }


def batch_manifest(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """The XCom value for one batch (shard): counts, cost and paths only."""
    out: dict[str, Any] = {}
    for key in BATCH_MANIFEST_KEYS:
        value = manifest.get(key)
        if key == "cost_usd":
            out[key] = float(value or 0.0)
        elif key in ("output_path", "report_path"):
            out[key] = str(value) if value else None
        else:
            out[key] = int(value or 0)
    return out


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
) -> dict[str, Any]:
    """Run (or resume) one runner task for one Airflow task instance; return the small manifest.

    ``run_id`` defaults to :func:`derive_run_id`. Raises what :func:`runner.api.run_task` raises
    for invalid configuration or inputs (nothing is spent then); a run that started returns a
    manifest whatever its status -- the operator decides whether that status fails the task.
    """
    from runner.api import run_task  # the lead's API; imported late so this module loads without it

    inputs = dict(inputs or {})
    run_id = run_id or derive_run_id(
        task=task, dag_id=dag_id, dag_run_id=dag_run_id, task_id=task_id, map_index=map_index, inputs=inputs
    )
    manifest = call_blocking(
        run_task,
        task,
        root=Path(root),
        inputs=inputs,
        run_id=run_id,
        caps=dict(caps) if caps else None,
        store_path=_optional_path(store_path),
        reports_dir=_optional_path(reports_dir),
        model_base_url=model_base_url or None,
        api_key=api_key or None,
    )
    return task_manifest(manifest)


def run_batch_for_airflow(
    task: str,
    *,
    root: str | Path,
    input_path: str | Path,
    output_path: str | Path,
    journal_path: str | Path | None,
    concurrency: int = 4,
    caps: Mapping[str, Any] | None = None,
    model_base_url: str | None = None,
    api_key: str | None = None,
) -> dict[str, Any]:
    """Run (always resuming) one batch over ``input_path``; return counts, cost and paths."""
    from runner.api import run_batch  # the lead's API

    manifest = call_blocking(
        run_batch,
        task,
        root=Path(root),
        input_path=Path(input_path),
        output_path=Path(output_path),
        concurrency=int(concurrency),
        resume=True,
        journal_path=_optional_path(journal_path),
        caps=dict(caps) if caps else None,
        model_base_url=model_base_url or None,
        api_key=api_key or None,
    )
    return batch_manifest(manifest)
