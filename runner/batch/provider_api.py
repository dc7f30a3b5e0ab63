"""The provider's Files and Batch APIs (OpenAI's ``/v1/files`` and ``/v1/batches``), as
``runner batch --via batch-api`` uses them: upload a round's requests, create the batch,
find it again by its metadata, poll it with backoff, cancel it, read its output and error
files, and turn each line into the answer or the typed error a live call would give.

Every endpoint failure leaves as a :class:`~runner.errors.ModelError` classified like a live
call's (:mod:`runner.model.openai_faults`), its message redacted, no SDK object chained.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any

from runner.batch.provider_state import BatchPart
from runner.errors import ModelError
from runner.model.base import ModelRequest
from runner.model.endpoint import Endpoint
from runner.model.faults import kind_for_status

CHAT_COMPLETIONS = "/v1/chat/completions"
FINISHED = frozenset({"completed", "failed", "expired", "cancelled"})
"""Provider batch statuses that will not change again."""
NOT_FOR_LIVE = frozenset({"bad_request", "auth", "not_found"})
"""Line errors a live call would meet too: never sent live by ``--batch-fallback live``."""


@dataclass(frozen=True)
class PollPolicy:
    """How often a provider batch is retrieved: ``first_seconds``, growing by ``factor`` up to
    ``max_seconds``; after a cancel, at most ``cancel_grace_seconds`` more for it to end."""

    first_seconds: float = 30.0
    max_seconds: float = 600.0
    factor: float = 1.5
    cancel_grace_seconds: float = 600.0  # OpenAI: a cancelled batch takes up to 10 minutes to end

    def waits(self) -> Iterator[float]:
        wait = self.first_seconds
        while True:
            yield wait
            wait = min(wait * self.factor, max(self.max_seconds, self.first_seconds))


class ProviderClient:
    """The Files and Batch APIs of one endpoint (the OpenAI flavour; Anthropic's is
    :class:`~runner.batch.message_batches.MessageBatchesClient`, with the same methods)."""

    files = True  # a round's requests are uploaded as a file, then the batch made of it

    def __init__(self, endpoint: Endpoint, timeout_seconds: float = 120.0):
        """Every request (upload, create, poll, cancel, download) carries ``endpoint.headers``."""
        from runner.model.sdk_faults import header_secrets

        self._client = _sdk_client(endpoint, timeout_seconds)
        self._secrets = (endpoint.api_key, *header_secrets(dict(endpoint.headers)))  # never repeated in a fault's message

    def call_id(self, run_id: str, batch_id: str, fingerprint: str) -> str:
        """A call's ``custom_id``: ``<row id>.<request fingerprint>``."""
        return f"{run_id.removeprefix(batch_id + '-')}.{fingerprint}"

    def decode_call_id(self, custom_id: str, batch_id: str) -> tuple[str, str] | None:
        """``(run id, fingerprint)`` of a ``custom_id`` made by :meth:`call_id`: how a worker that lost
        the record of a batch's calls (a retry on another machine) still keeps its answers."""
        row, dot, fingerprint = custom_id.rpartition(".")
        return (f"{batch_id}-{row}", fingerprint) if dot and row and fingerprint else None

    def line(self, call_id: str, request: ModelRequest, model_id: str) -> bytes:
        """One line of a batch's input file: the Chat Completions request as a live call sends it."""
        from runner.model.openai_client import wire_body

        line = {"custom_id": call_id, "method": "POST", "url": CHAT_COMPLETIONS, "body": wire_body(request, model_id)}
        return (json.dumps(line, ensure_ascii=False) + "\n").encode()

    async def submit(self, content: bytes, part: BatchPart, metadata: dict[str, str], batch_id: str, uploaded: Callable[[str], None]) -> str:
        """Upload ``content`` and create the batch of it; ``uploaded(file_id)`` is told in between."""
        file_id = await self.upload(part.filename(batch_id), content)
        uploaded(file_id)
        return await self.create(file_id, metadata)

    async def collected_lines(self, batch: Any) -> list[dict[str, Any]]:
        """Every line of an ended batch: its output file's, then its error file's."""
        return [*await self.lines(batch.output_file_id), *await self.lines(batch.error_file_id)]

    def outcome(self, line: dict[str, Any] | None, batch: Any) -> dict[str, Any] | ModelError:
        return line_outcome(line, batch)

    async def upload(self, name: str, content: bytes) -> str:
        uploaded = await self._call(self._client.files.create(file=(name, content), purpose="batch"))
        return str(uploaded.id)

    async def create(self, file_id: str, metadata: dict[str, str]) -> str:
        batch = await self._call(self._client.batches.create(
            input_file_id=file_id, endpoint=CHAT_COMPLETIONS, completion_window="24h", metadata=metadata,
        ))
        return str(batch.id)

    async def retrieve(self, provider_id: str) -> Any:
        return await self._call(self._client.batches.retrieve(provider_id))

    async def cancel(self, provider_id: str) -> Any:
        return await self._call(self._client.batches.cancel(provider_id))

    async def find(self, metadata: dict[str, str], since: float) -> str | None:
        """The batch created with ``metadata`` (newest first, none older than ``since``)."""
        async for batch in self._batches_since(since):
            if (batch.metadata or {}) == metadata:
                return str(batch.id)
        return None

    async def find_settled(
        self, part: BatchPart, metadata: dict[str, str], file_id: str | None, expected: set[str], known: set[str]
    ) -> str | None:
        """The batch created with ``metadata``, or ``None`` when none exists *and none can appear
        later*. A create sent by a process that died may still be in flight at the provider and
        land after any search; so when the first search finds nothing, the input file it would
        read (``file_id``) is deleted first, and a create that lands afterwards fails for want of
        it; then the search is made again (a create that landed in between is found). Without a
        ``file_id`` no create was sent (runner records the id before it creates), so one search
        is enough. A failed delete raises :class:`ModelError`: it cannot be told yet. (``expected``,
        ``known``: the calls' ids and the batches recorded, which the metadata makes unneeded here.)"""
        since = part.at - 600
        found = await self.find(metadata, since)
        if found is not None or file_id is None:
            return found
        await self.delete_file(file_id)
        return await self.find(metadata, since)

    async def files_in_use(self, since: float) -> set[str]:
        """The input files of batches not ended yet (none created before ``since``): never to be deleted."""
        return {str(batch.input_file_id) async for batch in self._batches_since(since) if batch.status not in FINISHED}

    async def uploaded(self, names: set[str], since: float) -> dict[str, list[str]]:
        """The ids of the batch input files named ``names`` (newest first, none older than ``since``), by name."""
        found: dict[str, list[str]] = {}
        page = await self._call(self._client.files.list(purpose="batch", order="desc", limit=1000))
        while True:
            for uploaded in page.data:
                if uploaded.created_at < since:
                    return found
                if uploaded.filename in names:
                    found.setdefault(str(uploaded.filename), []).append(str(uploaded.id))
            if not page.has_next_page():
                return found
            page = await self._call(page.get_next_page())

    async def delete_file(self, file_id: str) -> None:
        """Delete an uploaded file; one already gone is fine."""
        try:
            await self._call(self._client.files.delete(file_id))
        except ModelError as exc:
            if exc.kind != "not_found":
                raise

    async def _batches_since(self, since: float) -> AsyncIterator[Any]:
        """The endpoint's batches, newest first, down to the first created before ``since``."""
        page = await self._call(self._client.batches.list(limit=100))
        while True:
            for batch in page.data:
                if batch.created_at < since:
                    return
                yield batch
            if not page.has_next_page():
                return
            page = await self._call(page.get_next_page())

    async def lines(self, file_id: str | None) -> list[dict[str, Any]]:
        """The JSON lines of an output or error file (none without a file)."""
        if not file_id:
            return []
        content = await self._call(self._client.files.content(file_id))
        found: list[dict[str, Any]] = []
        for text in content.text.splitlines():
            try:
                line = json.loads(text) if text.strip() else None
            except ValueError:
                continue  # a garbled line: its call is answered as missing
            if isinstance(line, dict):
                found.append(line)
        return found

    async def close(self) -> None:
        await self._client.close()

    async def _call(self, pending: Any) -> Any:
        """Await one call; an endpoint failure becomes a :class:`ModelError`."""
        from runner.model.openai_faults import ENDPOINT_EXCEPTIONS, classify

        try:
            return await pending
        except ENDPOINT_EXCEPTIONS as exc:
            fault = classify(exc, self._secrets)
        raise fault.to_error(1)


def _sdk_client(endpoint: Endpoint, timeout_seconds: float) -> Any:
    import openai

    from runner.model.response_cap import MAX_BATCH_RESULTS_BYTES, capped_http_client

    try:
        return openai.AsyncOpenAI(
            base_url=endpoint.base_url, api_key=endpoint.api_key, max_retries=3, timeout=timeout_seconds,
            default_headers=dict(endpoint.headers),  # model.extra_headers (no key: config/profile_checks.py)
            http_client=capped_http_client(MAX_BATCH_RESULTS_BYTES),  # an endless output file ends the download, not the process
        )  # fmt: skip
    except openai.OpenAIError:
        pass
    # raised outside the except block: no SDK exception chained to ours
    raise ModelError("auth", "no API key: set the environment variable named by the agent's model api_key_env, or OPENAI_API_KEY")


def line_outcome(line: dict[str, Any] | None, batch: Any) -> dict[str, Any] | ModelError:
    """A line of a batch's output or error file as the completion body it holds, or the error
    a live call would have raised (``None``: the batch has no line for the call)."""
    if line is None:
        return _missing(batch)
    response = line.get("response") if isinstance(line.get("response"), dict) else None
    status = response.get("status_code") if response else None
    if response is not None and status == 200 and isinstance(response.get("body"), dict):
        return dict(response["body"])
    error = line.get("error") if isinstance(line.get("error"), dict) else None
    if error is not None:
        code = str(error.get("code") or "batch_error")
        return ModelError(code, f"provider batch {batch.id}: {str(error.get('message') or code)[:500]}")
    kind = kind_for_status(status) if isinstance(status, int) else "invalid_response"
    return ModelError(kind, f"provider batch {batch.id}: HTTP {status}: {_message(response)}")


def _missing(batch: Any) -> ModelError:
    """Why a call has no line: the batch failed validation, or it ended without answering it."""
    if batch.status == "failed":
        errors = batch.errors.data if batch.errors is not None and batch.errors.data else []
        found = "; ".join(f"{e.code}: {e.message}" for e in errors) or "no detail"
        return ModelError("batch_failed", f"provider batch {batch.id} failed validation: {found}")
    return ModelError(f"batch_{batch.status}", f"provider batch {batch.id} ended {batch.status} without an answer for this call")


def _message(response: dict[str, Any] | None) -> str:
    body = response.get("body") if response else None
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and error.get("message"):
        return str(error["message"])[:500]
    return "no detail"
