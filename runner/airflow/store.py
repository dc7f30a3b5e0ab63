"""Which database the runner's shared state lives in under Airflow (the run store, the shard
journals, the fan-out's cap ledger).

In order: the operator's ``store_conn_id`` argument, ``$RUNNER_STORE_CONN_ID`` (an Airflow
connection of type ``postgres``: host, port, login, password, schema = database, extras such
as ``sslmode``), ``$RUNNER_STORE_URL`` (``postgresql://...``). With none of them, each worker
keeps SQLite files under ``$RUNNER_ROOT/.runner`` (one machine only). The password is
registered with Airflow's secrets masker (plain and URL-encoded, and the whole URL) before the
URL is used, and it never goes to XCom.
"""

from __future__ import annotations

import os
from urllib.parse import quote

from runner.errors import UsageError

STORE_CONN_ENV = "RUNNER_STORE_CONN_ID"
"""The environment variable naming the Airflow connection of the shared store."""


def shared_store_url(conn_id: str | None) -> str | None:
    """The shared store's URL (see the module doc), or ``None`` for the SQLite files."""
    from runner.store.database import is_postgres_url, redacted_url, store_url_from_env

    conn_id = conn_id or os.environ.get(STORE_CONN_ENV) or None
    if not conn_id:
        return store_url_from_env()
    from airflow.sdk import BaseHook
    from airflow.sdk.log import mask_secret

    from runner.airflow._compat import AirflowNotFoundException

    try:
        conn = BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        raise UsageError(f"store connection {conn_id!r} is not defined (it names the runner's PostgreSQL store)") from None
    if conn.password:
        mask_secret(conn.password)
        mask_secret(quote(conn.password, safe=""))
    url = conn.get_uri()
    mask_secret(url)
    if not is_postgres_url(url):
        raise UsageError(
            f"store connection {conn_id!r} is {redacted_url(url)!r}; the runner's shared store must be a postgres "
            "connection (host, port, login, password, schema = the database)"
        )
    return url
