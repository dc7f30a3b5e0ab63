"""Cancelling provider batches a run has out, when nobody will collect them.

Two callers:

- ``runner batch --restart`` (:func:`cancel_discarded`): starting over discards the journal,
  and with it the only record of the provider batches the last run left out
  (:mod:`runner.batch.provider_state`). They would go on running, and be billed, while the new
  run submits the same rows again; so each is cancelled first, and said so on stderr. The
  restart keeps their record in the new journal in the transaction that empties it, and it is
  dropped only once they are dealt with: a restart killed during its cancels leaves them to the
  next run of the command. A batch
  about to be created when the last process ended (an intent) is looked for by its metadata
  and cancelled too. Their input files, and the ones the last run had not deleted yet, go
  into the new journal's list of files to delete once no batch reads them
  (:meth:`~runner.batch.rounds.RoundCollector.delete_unneeded_files`).
- Airflow's ``on_kill`` in a worker (:class:`ProviderWatch`): the batches the running
  batch has out right now, cancelled from the signal handler, in a thread of its own.

A batch that cannot be cancelled (its endpoint is not configured, has no key, or refuses) is
named with how to cancel it by hand; nothing here raises for it.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable
from typing import IO, TYPE_CHECKING, Any

from runner.batch.batch_flavours import BatchClient, batch_client
from runner.batch.provider_api import FINISHED
from runner.batch.provider_state import BatchPart, ProviderState, UnneededFile, recorded
from runner.errors import ModelError

if TYPE_CHECKING:
    from runner.batch.journal import BatchJournal
    from runner.batch.request import BatchRequest
    from runner.config.project import Project
    from runner.config.specs import TaskSpec
    from runner.model.endpoint import Endpoint

Say = Callable[[str], None]


async def cancel_discarded(
    project: Project, task: TaskSpec, request: BatchRequest, journal: BatchJournal, log: IO[str]
) -> list[str]:
    """Cancel the provider batches of the journals ``--restart`` discarded (:attr:`BatchJournal.discarded`,
    kept in the new journal by the restart itself, so a restart killed before its cancels leaves
    them to the next run of the command, with or without ``--restart``); returns their ids."""
    discarded = journal.discarded
    if not discarded:
        return []
    from runner.batch.batch_api import provider_endpoints
    from runner.batch.rounds import endpoint_key

    endpoints = {endpoint_key(e): e for e in provider_endpoints(project, task, request)}

    def say(text: str) -> None:
        print(f"--restart: {text}", file=log, flush=True)

    cancelled: list[str] = []
    leftover: list[UnneededFile] = []
    for entry in discarded:
        batches, intents, files = recorded(_state(entry))
        out = [(batch.id, batch.part) for batch in batches]
        done, more = await cancel_out(out, intents, endpoints, entry.get("batch_id", ""), say, whose=" of the previous run")
        cancelled += done
        leftover += files + more
    ProviderState(journal).abandoned(leftover)  # deleted by a later --via batch-api run, once their batches ended
    journal.discarded_settled()  # (killed before this line: the next run cancels them again, which is harmless)
    return cancelled


async def cancel_out(
    out: list[tuple[str, BatchPart]], intents: list[BatchPart], endpoints: dict[str, Endpoint], batch_id: str, say: Say,
    *, whose: str = "",
) -> tuple[list[str], list[UnneededFile]]:
    """Cancel the batches ``out`` and those ``intents`` became (found by metadata); returns the ids
    cancelled and the input files of them all (to delete once they have ended)."""
    clients: dict[str, BatchClient] = {}
    cancelled: list[str] = []
    files: list[UnneededFile] = []
    try:
        out = list(out)
        for part in intents:
            found = await _find(_client(clients, endpoints, part.endpoint), part, batch_id)
            if found is not None:
                out.append((found, part))
            files.append(UnneededFile(part.endpoint, part.filename(batch_id), part.file_id, part.at))
        for provider_id, part in out:
            if await _cancel(_client(clients, endpoints, part.endpoint), provider_id, part, say, whose):
                cancelled.append(provider_id)
            files.append(UnneededFile(part.endpoint, part.filename(batch_id), part.file_id, part.at))
    finally:
        for client in clients.values():
            await client.close()
    return cancelled, files


class ProviderWatch:
    """The provider batches a ``--via batch-api`` run has out right now, for code outside its
    event loop to cancel: Airflow's ``on_kill``, called from a signal handler while the loop runs
    (:attr:`runner.batch.request.BatchRequest.watch`)."""

    def __init__(self) -> None:
        self._state: ProviderState | None = None
        self._endpoints: dict[str, Endpoint] = {}
        self._batch_id = ""

    def attach(self, state: ProviderState, endpoints: dict[str, Endpoint], batch_id: str) -> None:
        """Called by the run once its rounds start (its state is updated as batches go out)."""
        self._state, self._endpoints, self._batch_id = state, dict(endpoints), batch_id

    @property
    def out(self) -> tuple[str, ...]:
        return () if self._state is None else self._state.out_ids

    def cancel(self, say: Say, timeout_seconds: float = 60.0) -> list[str]:
        """Cancel every batch out (and any being created), in a thread with its own event loop
        (the run's loop is the one a signal interrupted); the ids cancelled."""
        state = self._state
        if state is None or not (state.out or state.intents):
            return []
        out = [(batch.id, batch.part) for batch in state.out]
        intents = list(state.intents)
        done: list[str] = []

        def work() -> None:
            cancelled, _ = asyncio.run(cancel_out(out, intents, self._endpoints, self._batch_id, say))
            done.extend(cancelled)

        thread = threading.Thread(target=work, name="runner-provider-cancel", daemon=True)
        thread.start()
        thread.join(timeout_seconds)
        return done


def _state(meta: dict[str, str]) -> dict[str, Any]:
    try:
        state = json.loads(meta.get("provider_state") or "{}")
    except ValueError:
        return {}
    return state if isinstance(state, dict) else {}


def _client(clients: dict[str, BatchClient], endpoints: dict[str, Endpoint], key: str) -> BatchClient | None:
    """The client for the endpoint a batch is at; ``None`` when it cannot be reached from here."""
    if key not in endpoints:
        return None
    if key not in clients:
        try:
            clients[key] = batch_client(endpoints[key])
        except ModelError:  # no API key for it
            return None
    return clients[key]


async def _find(client: BatchClient | None, part: BatchPart, batch_id: str) -> str | None:
    """The batch an intent became (a Message Batch, which has no metadata, is not looked for
    here: without its calls' ids it could be told from another client's only by chance)."""
    if client is None:
        return None
    try:  # a create still in flight cannot land after this look (its input file goes first)
        return await client.find_settled(part, part.metadata(batch_id), part.file_id, set(), set())
    except ModelError:
        return None


async def _cancel(client: BatchClient | None, provider_id: str, part: BatchPart, say: Say, whose: str) -> bool:
    """Cancel one batch, saying so (or why not, and what to do)."""
    how = f"cancel it at the provider (POST {part.endpoint}/batches/{provider_id}/cancel) so it is not paid for twice"
    if client is None:
        say(f"provider batch {provider_id}{whose} is at {part.endpoint}, which cannot be reached from here (no agent "
            f"of this task calls it now, or it has no API key): {how}")  # fmt: skip
        return False
    try:
        batch = await client.cancel(provider_id)
    except ModelError as exc:
        if exc.kind != "bad_request":  # a provider may answer 400 for a batch that has already ended
            say(f"provider batch {provider_id}{whose} could not be cancelled ({exc}): {how}")
            return False
        batch = None
    status = getattr(batch, "status", "completed")
    if status in FINISHED and status != "cancelled":
        say(f"provider batch {provider_id}{whose} had already ended ({status})")
        return False
    say(f"cancelled provider batch {provider_id} (round {part.round}){whose}, so its rows are not paid for twice")
    return True
