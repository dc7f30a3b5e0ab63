"""``runner batch --restart`` over a journal whose provider batches are still out: cancel them.

Starting over discards the journal, and with it the only record of the provider batches the
last run left out (:mod:`runner.batch.provider_state`). They would go on running, and be
billed, while the new run submits the same rows again: so each is cancelled first, and said
so on stderr. A batch about to be created when the last process ended (an intent) is looked
for by its metadata and cancelled too. Their input files, and the ones the last run had not
deleted yet, go into the new journal's list of files to delete once no batch reads them
(:meth:`~runner.batch.rounds.RoundCollector.delete_unneeded_files`). A batch that cannot be
cancelled (its endpoint is no longer configured, or refuses) is named on stderr with how to
cancel it by hand; the restart goes on.
"""

from __future__ import annotations

import json
from typing import IO, TYPE_CHECKING, Any

from runner.batch.provider_api import FINISHED, ProviderClient
from runner.batch.provider_state import BatchPart, ProviderState, UnneededFile, recorded
from runner.errors import ModelError

if TYPE_CHECKING:
    from runner.batch.file_batch import BatchRequest
    from runner.batch.journal import BatchJournal
    from runner.config.project import Project
    from runner.config.specs import TaskSpec
    from runner.model.factory import Endpoint


async def cancel_discarded(
    project: Project, task: TaskSpec, request: BatchRequest, journal: BatchJournal, log: IO[str]
) -> list[str]:
    """Cancel the provider batches of the journal ``--restart`` discarded; returns their ids."""
    old_batch_id = journal.discarded.get("batch_id", "")
    batches, intents, files = recorded(_state(journal.discarded))
    out = [(batch.id, batch.part) for batch in batches]
    if not (out or intents or files):
        return []
    from runner.batch.batch_api import provider_endpoints
    from runner.batch.rounds import endpoint_key

    endpoints = {endpoint_key(e): e for e in provider_endpoints(project, task, request)}
    cancelled: list[str] = []
    clients: dict[str, ProviderClient] = {}
    try:
        for part in intents:
            found = await _find(_client(clients, endpoints, part.endpoint), part, old_batch_id)
            if found is not None:
                out.append((found, part))
            files.append(UnneededFile(part.endpoint, part.filename(old_batch_id), part.file_id, part.at))
        for provider_id, part in out:
            if await _cancel(_client(clients, endpoints, part.endpoint), provider_id, part, log):
                cancelled.append(provider_id)
            files.append(UnneededFile(part.endpoint, part.filename(old_batch_id), part.file_id, part.at))
    finally:
        for client in clients.values():
            await client.close()
    ProviderState(journal).abandoned(files)  # deleted by a later --via batch-api run, once their batches ended
    return cancelled


def _state(meta: dict[str, str]) -> dict[str, Any]:
    try:
        state = json.loads(meta.get("provider_state") or "{}")
    except ValueError:
        return {}
    return state if isinstance(state, dict) else {}


def _client(clients: dict[str, ProviderClient], endpoints: dict[str, Endpoint], key: str) -> ProviderClient | None:
    """The client for the endpoint a batch is at; ``None`` when this task cannot reach it now."""
    if key not in endpoints:
        return None
    if key not in clients:
        try:
            clients[key] = ProviderClient(endpoints[key])
        except ModelError:  # no API key for it
            return None
    return clients[key]


async def _find(client: ProviderClient | None, part: BatchPart, old_batch_id: str) -> str | None:
    if client is None:
        return None
    try:
        return await client.find(part.metadata(old_batch_id), since=part.at - 600)
    except ModelError:
        return None


async def _cancel(client: ProviderClient | None, provider_id: str, part: BatchPart, log: IO[str]) -> bool:
    """Cancel one batch of the discarded journal, saying so (or why not, and what to do) on ``log``."""
    how = f"cancel it at the provider (POST {part.endpoint}/batches/{provider_id}/cancel) so it is not paid for twice"
    if client is None:
        print(f"--restart: provider batch {provider_id} of the previous run is at {part.endpoint}, which this task "
              f"cannot reach now (no agent calls it, or no API key): {how}", file=log, flush=True)  # fmt: skip
        return False
    try:
        batch = await client.cancel(provider_id)
    except ModelError as exc:
        if exc.kind != "bad_request":  # a provider may answer 400 for a batch that has already ended
            print(f"--restart: provider batch {provider_id} of the previous run could not be cancelled ({exc}): {how}",
                  file=log, flush=True)  # fmt: skip
            return False
        batch = None
    status = getattr(batch, "status", "completed")
    if status in FINISHED and status != "cancelled":
        print(f"--restart: provider batch {provider_id} of the previous run had already ended ({status})", file=log, flush=True)
        return False
    print(f"--restart: cancelled provider batch {provider_id} (round {part.round}) of the previous run, so its rows "
          "are not paid for twice", file=log, flush=True)  # fmt: skip
    return True
