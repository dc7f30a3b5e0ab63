"""SQL sources named by Airflow connection (``airflow_conn_id``): their URLs, from Airflow.

The operator resolves each connection the task's sources name through Airflow (its secrets
backends, the metadata database, or ``AIRFLOW_CONN_*``), masks the password in task logs, and
hands the URLs to the run; they never reach XCom, a template field or a record.
"""

from __future__ import annotations

from pathlib import Path


def source_urls(root: str | Path, task: str) -> dict[str, str]:
    """Source name -> URL (with its password) for every source of ``task`` with ``airflow_conn_id``."""
    from airflow.sdk import BaseHook
    from airflow.sdk.log import mask_secret  # Airflow >= 3.1: masks in the task process and tells the supervisor

    from runner.config.project import load_project_or_raise

    project = load_project_or_raise(Path(root))
    spec = project.task_for(task)
    urls: dict[str, str] = {}
    for name, source in project.sources_for(spec).items():
        if not source.airflow_conn_id:
            continue
        connection = BaseHook.get_connection(source.airflow_conn_id)
        if connection.password:
            mask_secret(connection.password)
        urls[name] = connection.get_uri()
        mask_secret(urls[name])
    return urls
