"""The few Airflow names whose home moved between Airflow 3.1 and 3.2+ (task SDK 1.1 -> 1.2+),
and the asynchronous connection and masking calls a trigger makes (safe only from 3.3.2).

Everything else is imported from ``airflow.sdk`` directly. On Airflow >= 3.2 these
exceptions live in ``airflow.sdk.exceptions``; the 3.1 task SDK still used the ones in
``airflow.exceptions`` (a connection that is not defined raises that module's
``AirflowNotFoundException`` there), so on 3.1 they must come from there to be caught.
"""

from __future__ import annotations

from typing import Any

try:
    from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowNotFoundException
except ImportError:  # pragma: no cover - Airflow 3.1 (task SDK 1.1)
    from airflow.exceptions import (  # type: ignore[no-redef]
        AirflowException,
        AirflowFailException,
        AirflowNotFoundException,
    )

__all__ = [
    "AirflowException", "AirflowFailException", "AirflowNotFoundException", "get_connection_async", "mask_secret_async",
]  # fmt: skip


async def get_connection_async(conn_id: str) -> Any:
    """An Airflow connection, from a coroutine (a trigger). Before Airflow 3.3.2,
    ``BaseHook.aget_connection`` masked secrets with a synchronous supervisor call, which
    deadlocks when another call is in flight on the triggerer's loop; there the synchronous
    ``get_connection`` runs in a thread instead."""
    from airflow.sdk import BaseHook, Connection

    if hasattr(Connection, "aextra_dejson"):  # Airflow >= 3.3.2: masking is asynchronous too
        return await BaseHook.aget_connection(conn_id)
    from asgiref.sync import sync_to_async

    return await sync_to_async(BaseHook.get_connection)(conn_id)


async def mask_secret_async(secret: str) -> None:
    """Register ``secret`` with Airflow's masker from a coroutine (see :func:`get_connection_async`)."""
    from airflow.sdk import log

    if hasattr(log, "amask_secret"):
        await log.amask_secret(secret)
        return
    from asgiref.sync import sync_to_async

    await sync_to_async(log.mask_secret)(secret)
