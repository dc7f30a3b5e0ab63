"""ProviderBatchTrigger: Airflow's triggerer waits for provider batches, no worker slot held.

:class:`~runner.airflow.batch_operator.RunnerBatchOperator` (``deferrable=True``) defers on
it once its rows are out at the provider; the triggerer polls the batches through the
``openai`` SDK (:func:`runner.airflow.batch_wait.wait_for_batches`) and fires one event
when all have ended, or a clear error (see :class:`~runner.airflow.batch_wait.BatchWaitEvent`).

Airflow stores a trigger's keyword arguments (:meth:`ProviderBatchTrigger.serialize`) in its
database, so they never hold the API key: only where to find it, resolved in the triggerer
each time the trigger starts -- the ``runner_model`` connection's password (``conn_id``), or
the environment variable the agent's model names (``api_key_env``, which must then be set
where ``airflow triggerer`` runs) -- and the base URL the batch was submitted to.
"""

from __future__ import annotations

import math
import os
from collections.abc import AsyncIterator, Sequence
from typing import Any
from urllib.parse import urlsplit

from airflow.triggers.base import BaseTrigger, TriggerEvent

from runner.airflow.batch_wait import BatchWaitEvent, WaitPolicy, wait_for_batches
from runner.errors import UsageError

CLASSPATH = "runner.airflow.triggers.ProviderBatchTrigger"
REQUEST_TIMEOUT_SECONDS = 60.0


class _NoKey(Exception):
    """The triggerer cannot find the key the trigger names."""


class ProviderBatchTrigger(BaseTrigger):
    """Fire once when every provider batch in ``batch_ids`` (at ``base_url``) has ended."""

    def __init__(
        self,
        batch_ids: Sequence[str],
        base_url: str,
        *,
        conn_id: str | None = None,
        api_key_env: str | None = None,
        poll_seconds: float = 30.0,
        max_poll_seconds: float = 600.0,
        unreachable_seconds: float = 1800.0,
        cancel_at: float | None = None,
        cancel_reason: str | None = None,
        cancel_on_kill: bool = True,
    ) -> None:
        super().__init__()
        if not batch_ids or not all(isinstance(b, str) and b for b in batch_ids):
            raise UsageError(f"batch_ids: expected provider batch ids, got {batch_ids!r}")
        if urlsplit(base_url).password is not None:
            raise UsageError("the model base URL carries a password; put the key in the connection's password instead")
        if conn_id and api_key_env:
            raise UsageError("give the trigger conn_id or api_key_env, not both")
        for name, seconds in (("poll_seconds", poll_seconds), ("max_poll_seconds", max_poll_seconds),
                              ("unreachable_seconds", unreachable_seconds)):  # fmt: skip
            if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not 0 < seconds < math.inf:
                raise UsageError(f"{name}: expected a positive number of seconds, got {seconds!r}")
        self.batch_ids = list(batch_ids)
        self.base_url = base_url
        self.conn_id = conn_id
        self.api_key_env = api_key_env
        self.cancel_on_kill = bool(cancel_on_kill)
        self.policy = WaitPolicy(
            first_seconds=float(poll_seconds), max_seconds=float(max_poll_seconds),
            unreachable_seconds=float(unreachable_seconds), cancel_at=cancel_at, cancel_reason=cancel_reason,
        )  # fmt: skip

    def serialize(self) -> tuple[str, dict[str, Any]]:
        """The class path and keyword arguments Airflow stores: ids, URL, where the key is; never the key."""
        policy = self.policy
        return CLASSPATH, {
            "batch_ids": list(self.batch_ids), "base_url": self.base_url, "conn_id": self.conn_id,
            "api_key_env": self.api_key_env, "poll_seconds": policy.first_seconds,
            "max_poll_seconds": policy.max_seconds, "unreachable_seconds": policy.unreachable_seconds,
            "cancel_at": policy.cancel_at, "cancel_reason": policy.cancel_reason,
            "cancel_on_kill": self.cancel_on_kill,
        }  # fmt: skip

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Wait (see :mod:`runner.airflow.batch_wait`) and yield its one event."""
        try:
            key = await self._api_key()
        except _NoKey as missing:
            yield TriggerEvent(BatchWaitEvent.error("no_key", str(missing)).as_payload())
            return
        import openai

        client = openai.AsyncOpenAI(
            base_url=self.base_url, api_key=key or "not-needed", max_retries=0, timeout=REQUEST_TIMEOUT_SECONDS
        )
        try:
            event = await wait_for_batches(client, self.batch_ids, self.policy)
        finally:
            await client.close()
        self.log.info("provider batch(es) %s: %s", ", ".join(self.batch_ids), event.status)
        yield TriggerEvent(event.as_payload())

    async def on_kill(self) -> None:
        """A user marked the deferred task failed or succeeded, or cleared it: cancel the
        provider batches still out, so nothing more runs (or is billed) for a task nobody
        waits for. Airflow's triggerer calls this only for such a user action (Airflow 3.3
        does; a triggerer without ``BaseTrigger.on_kill`` never calls it), never when a triggerer stops or restarts: the trigger then moves to another
        triggerer and goes on waiting. A cleared task's next try re-attaches to the cancelled
        batch and collects the rows it finished; the others are resubmitted by a retry, as an
        expired batch's are.
        ``cancel_on_kill=False`` leaves the batches running. Failures are logged, never raised."""
        if not self.cancel_on_kill:
            self.log.info("task killed: provider batch(es) %s left running (cancel_on_kill=False)", ", ".join(self.batch_ids))
            return
        try:
            key = await self._api_key()
        except _NoKey as missing:
            self.log.warning("task killed, but provider batch(es) %s cannot be cancelled: %s", ", ".join(self.batch_ids), missing)
            return
        import openai

        from runner.airflow.batch_wait import cancel_batches

        client = openai.AsyncOpenAI(
            base_url=self.base_url, api_key=key or "not-needed", max_retries=1, timeout=REQUEST_TIMEOUT_SECONDS / 4
        )
        try:
            problems = await cancel_batches(client, self.batch_ids)
        finally:
            await client.close()
        for problem in problems:
            self.log.warning("task killed; %s", problem)
        if not problems:
            self.log.info("task killed: provider batch(es) %s cancelled", ", ".join(self.batch_ids))

    async def _api_key(self) -> str | None:
        """The key, from the connection or the environment variable named; ``None`` when neither is named."""
        if self.conn_id:
            from runner.airflow._compat import AirflowNotFoundException, get_connection_async

            try:
                conn = await get_connection_async(self.conn_id)
            except AirflowNotFoundException:
                raise _NoKey(f"the connection {self.conn_id!r} is not defined where the triggerer runs") from None
            if not conn.password:
                raise _NoKey(f"the connection {self.conn_id!r} has no password (the API key)")
            return str(conn.password)
        if self.api_key_env:
            key = os.environ.get(self.api_key_env)
            if not key:
                raise _NoKey(
                    f"the triggerer's environment has no {self.api_key_env} (the key the agent's model names): set it "
                    "where `airflow triggerer` runs, or give the operator a runner_model connection (conn_id)"
                )
            from runner.airflow._compat import mask_secret_async

            await mask_secret_async(key)
            return key
        return None
