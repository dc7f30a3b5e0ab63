"""The extra link each runner operator shows on its task: the run's or the batch's report.

Airflow computes an operator's links in the worker when the task ends (success or failure)
and keeps them as XCom; the UI shows them as buttons. :class:`RunnerReportLink` links to the
report the try wrote: ``report.html`` of a run's report folder, the batch report of a batch
(a local path as a ``file://`` URL, a URL such as ``s3://...`` as it is). With
``$RUNNER_REPORTS_URL`` set (the web address where the reports folder is served), a report
under ``$RUNNER_REPORTS_DIR`` is linked there instead, so a browser can open it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from airflow.sdk import BaseOperatorLink

from runner.core.report_formats import FILE_NAMES

REPORTS_URL_ENV = "RUNNER_REPORTS_URL"


class RunnerReportLink(BaseOperatorLink):
    """"Runner report": the report of the run or batch this task instance's last try wrote."""

    name = "Runner report"

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        manifest = getattr(operator, "last_manifest", None) or _pulled(ti_key)
        return report_url(manifest) if isinstance(manifest, dict) else ""


def _pulled(ti: Any) -> Any:
    """The manifest the task returned (or pushed as ``manifest`` when it failed), when ``ti``
    can pull XCom (the worker's task instance); else ``None``."""
    pull = getattr(ti, "xcom_pull", None)
    if pull is None:
        return None
    try:
        return pull(key="return_value") or pull(key="manifest")
    except Exception:  # a link must never fail the task; no link then
        return None


def report_url(manifest: dict[str, Any]) -> str:
    """Where a manifest's report is, as a URL (see the module doc); ``""`` when it has none."""
    place = manifest.get("report_path")
    if not place:
        return ""
    text = str(place)
    if "://" in text:
        return text.rstrip("/") + ("/report.html" if _is_run_report(manifest) else "")
    path = Path(text)
    target = path / FILE_NAMES["html"] if _is_run_report(manifest) and path.suffix == "" else path
    base, served = os.environ.get(REPORTS_URL_ENV, ""), os.environ.get("RUNNER_REPORTS_DIR", "")
    if base and served and not served.startswith(("s3://", "gs://")) and target.is_relative_to(Path(served)):
        return base.rstrip("/") + "/" + target.relative_to(Path(served)).as_posix()
    return target.as_uri() if target.is_absolute() else text


def _is_run_report(manifest: dict[str, Any]) -> bool:
    return "run_id" in manifest and "batch_id" not in manifest
