"""Which database the runner's shared state lives in under Airflow (the run store, the shard
journals, the fan-out's cap ledger).

In order: the operator's ``store_conn_id`` argument, ``$RUNNER_STORE_CONN_ID`` (an Airflow
connection of type ``postgres``, or ``generic`` where the postgres provider is not installed:
host, port, login, password, schema = database, extras such as ``sslmode``), ``$RUNNER_STORE_URL`` (``postgresql://...``). With none of them, each worker
keeps SQLite files under ``$RUNNER_ROOT/.runner`` (one machine only). The password is
registered with Airflow's secrets masker (plain and URL-encoded, and the whole URL) before the
URL is used, and it never goes to XCom.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, urlencode

from runner.errors import UsageError

STORE_CONN_ENV = "RUNNER_STORE_CONN_ID"
"""The environment variable naming the Airflow connection of the shared store."""


def shared_store_url(conn_id: str | None) -> str | None:
    """The shared store's URL (see the module doc), or ``None`` for the SQLite files."""
    from runner.store.database import store_url_from_env

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
    if (conn.conn_type or "generic") not in POSTGRES_TYPES:
        raise UsageError(
            f"store connection {conn_id!r} is of type {conn.conn_type!r}; the runner's shared store must be a "
            "postgres connection (host, port, login, password, schema = the database)"
        )
    url = postgres_url(conn.host, conn.port, conn.login, conn.password, conn.schema, conn.extra_dejson if conn.extra else {})
    mask_secret(url)
    return url


POSTGRES_TYPES = ("postgres", "postgresql", "generic")
"""Connection types taken as PostgreSQL (``generic`` is what Airflow stores without the postgres provider)."""


def postgres_url(
    host: str | None, port: int | None, login: str | None, password: str | None, database: str | None,
    extra: Mapping[str, Any],
) -> str:  # fmt: skip
    """A libpq URL from a connection's fields; extras (``sslmode``, ``options``, ...) become parameters."""
    if not host:
        raise UsageError("the store connection has no host")
    user = quote(login or "", safe="") + (f":{quote(password, safe='')}" if password else "")
    where = f"{user}@" if user else ""
    query = urlencode({k: v for k, v in extra.items() if isinstance(v, str | int | float)})
    host = quote(host, safe="") if host.startswith("/") else host  # a Unix socket directory
    return f"postgresql://{where}{host}{f':{int(port)}' if port else ''}/{quote(database or '', safe='')}" + (
        f"?{query}" if query else ""
    )
