"""Anthropic's Message Batches API, as ``runner batch --via batch-api`` uses it.

The same duties as the OpenAI flavour (:class:`~runner.batch.provider_api.ProviderClient`),
over another protocol: no files (a round's requests go in the create call itself,
``POST /v1/messages/batches`` with ``requests: [{custom_id, params}]``), a
``processing_status`` of ``in_progress``, ``canceling`` or ``ended``, and the results as JSONL
at ``/v1/messages/batches/{id}/results``, each ``succeeded`` (a message), ``errored``,
``canceled`` or ``expired``. A batch is shown to the rounds (:mod:`runner.batch.rounds`) in
OpenAI's words (:class:`BatchView`: ``completed``, ``cancelled``, ``expired``...).

A Message Batch carries no metadata, so a batch whose create outlived its process (killed
between sending the create and recording the id) is found by what it holds: a batch created
after the intent with the intent's number of requests, not recorded already, whose results
(once it has ended) answer exactly the calls of the intent (``custom_id`` is a hash of the
call's run id and request fingerprint: the same call, the same id, in any process). A
candidate still running is taken as the intent's batch, and its results are checked when it
is collected: a line for a call the part does not hold is ignored, and the call it should
have answered gets a per-row ``batch_unknown_ids`` error (never a second bill).

A batch whose record of calls (the run store's ``provider_answers.batch_part``) is gone while
its journal is not: OpenAI's ``custom_id`` is ``<row>.<fingerprint>``, decoded back to the call;
here it must be at most 64 of ``[a-zA-Z0-9_-]`` and the request fingerprint alone is 64 hex
digits, so it is a hash, and a Message Batch has no metadata to carry the mapping
(``MessageBatch``: id, created_at, ended_at, expires_at, processing_status, request_counts,
results_url...; its create takes ``requests`` only). Its answers are kept unclaimed, under the
hash, and each resumed call whose hash it is takes its own
(:class:`~runner.store.provider_answers.ProviderAnswers`): nothing is sent or paid twice.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from runner.batch.provider_state import BatchPart
from runner.errors import ModelError
from runner.model.base import ModelRequest
from runner.model.endpoint import Endpoint
from runner.model.response_cap import MAX_BATCH_RESULTS_BYTES
from runner.store.provider_answers import hashed_call_id

MAX_REQUESTS = 100_000
MAX_BYTES = 256_000_000
CLOCK_SKEW_SECONDS = 5.0
"""How far the provider's creation time may be before our clock's intent, and still match it."""
_ERROR_KINDS = {
    "invalid_request_error": "bad_request", "authentication_error": "auth", "permission_error": "auth",
    "not_found_error": "not_found", "request_too_large": "bad_request", "rate_limit_error": "rate_limited",
    "api_error": "server_error", "overloaded_error": "server_error",
}  # fmt: skip


@dataclass(frozen=True)
class Counts:
    """``request_counts`` in OpenAI's words (what :func:`runner.batch.rounds._answered` shows)."""

    completed: int
    failed: int
    total: int


@dataclass(frozen=True)
class BatchView:
    """A Message Batch as the rounds read a provider batch."""

    id: str
    status: str  # in_progress | cancelling | completed | cancelled | expired
    request_counts: Counts
    created_at: float
    input_file_id: None = None
    output_file_id: None = None
    error_file_id: None = None

    @classmethod
    def of(cls, data: dict[str, Any]) -> BatchView:
        counts = data.get("request_counts") or {}
        done = {k: int(counts.get(k) or 0) for k in ("processing", "succeeded", "errored", "canceled", "expired")}
        status = {"in_progress": "in_progress", "canceling": "cancelling"}.get(str(data.get("processing_status")), "")
        if not status:
            answered = done["succeeded"] + done["errored"]
            status = "cancelled" if data.get("cancel_initiated_at") else "expired" if done["expired"] and not answered else "completed"
        failed = done["errored"] + done["canceled"] + done["expired"]
        return cls(str(data["id"]), status, Counts(done["succeeded"], failed, sum(done.values())), _epoch(data.get("created_at")))


def _epoch(stamp: object) -> float:
    from datetime import datetime

    try:
        return datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0




class MessageBatchesClient:
    """The Message Batches API of one Anthropic endpoint."""

    files = False  # nothing is uploaded: the requests travel in the create call

    def __init__(self, endpoint: Endpoint, timeout_seconds: float = 120.0):
        from runner.model.anthropic_client import make_client
        from runner.model.sdk_faults import header_secrets

        self._client = make_client(endpoint.base_url, endpoint.api_key, timeout_seconds, max_retries=3, headers=dict(endpoint.headers),
                                   max_response_bytes=MAX_BATCH_RESULTS_BYTES)  # a batch's results: one answer per request
        self._secrets = (endpoint.api_key, *header_secrets(dict(endpoint.headers)))  # never repeated in a fault's message

    def call_id(self, run_id: str, batch_id: str, fingerprint: str) -> str:
        """The ``custom_id`` of a call: 1-64 of ``[a-zA-Z0-9_-]``, as the API requires, so a hash
        of the run id and the request fingerprint (:func:`~runner.store.provider_answers.hashed_call_id`)."""
        return hashed_call_id(run_id, fingerprint)

    def decode_call_id(self, custom_id: str, batch_id: str) -> tuple[str, str] | None:
        """A hashed ``custom_id`` names no call by itself: only the record of the batch's calls does
        (without it, its answer is kept unclaimed, for the call whose hash it is)."""
        return None

    def line(self, call_id: str, request: ModelRequest, model_id: str) -> bytes:
        """One request of a batch: its ``params`` are the Messages API body a live call sends."""
        from runner.model.anthropic_wire import request_body

        params = request_body(request, model_id)
        return (json.dumps({"custom_id": call_id, "params": params}, ensure_ascii=False) + "\n").encode()

    async def submit(self, content: bytes, part: BatchPart, metadata: dict[str, str], batch_id: str, uploaded: Any) -> str:
        """Create the batch of ``content``'s requests (``metadata`` cannot travel: see the module doc)."""
        requests = [json.loads(text) for text in content.decode().splitlines() if text.strip()]
        created = await self._json("POST", "/v1/messages/batches", {"requests": requests})
        return str(created["id"])

    async def retrieve(self, provider_id: str) -> BatchView:
        return BatchView.of(await self._json("GET", f"/v1/messages/batches/{provider_id}"))

    async def cancel(self, provider_id: str) -> BatchView:
        return BatchView.of(await self._json("POST", f"/v1/messages/batches/{provider_id}/cancel", {}))

    async def find_settled(self, part: BatchPart, metadata: dict[str, str], file_id: str | None, expected: set[str], known: set[str]) -> str | None:
        """The batch a create of ``part`` that outlived its process made, or ``None`` (module doc;
        ``None`` too without ``expected``: nothing to tell it from another client's by)."""
        if not expected:
            return None
        for batch in await self._since(part.at - CLOCK_SKEW_SECONDS):
            if batch.id in known or (part.requests and batch.request_counts.total != part.requests):
                continue
            if batch.status in ("in_progress", "cancelling"):
                return batch.id
            ids = await self._ids(batch.id)
            if ids and expected.issuperset(ids):
                return batch.id
        return None

    async def _since(self, since: float) -> list[BatchView]:
        found: list[BatchView] = []
        params: dict[str, Any] = {"limit": 100}
        while True:
            page = await self._json("GET", "/v1/messages/batches", params=params)
            for data in page.get("data") or ():
                batch = BatchView.of(data)
                if batch.created_at < since:
                    return found
                found.append(batch)
            if not page.get("has_more") or not page.get("last_id"):
                return found
            params = {"limit": 100, "after_id": page["last_id"]}

    async def _ids(self, provider_id: str) -> set[str]:
        return {str(line.get("custom_id")) for line in await self.results(provider_id)}

    async def files_in_use(self, since: float) -> set[str]:
        return set()

    async def uploaded(self, names: set[str], since: float) -> dict[str, list[str]]:
        return {}

    async def delete_file(self, file_id: str) -> None:
        """No files to delete."""

    async def results(self, provider_id: str) -> list[dict[str, Any]]:
        """The JSON lines of an ended batch's results (a garbled line is left out: its call is missing)."""
        response = await self._raw("GET", f"/v1/messages/batches/{provider_id}/results")
        found: list[dict[str, Any]] = []
        for text in response.text.splitlines():
            try:
                line = json.loads(text) if text.strip() else None
            except ValueError:
                continue
            if isinstance(line, dict):
                found.append(line)
        return found

    async def collected_lines(self, batch: BatchView) -> list[dict[str, Any]]:
        return await self.results(batch.id)

    def outcome(self, line: dict[str, Any] | None, batch: BatchView) -> dict[str, Any] | ModelError:
        """A result line as the message it holds, or the error a live call would have raised."""
        found = line.get("result") if isinstance(line, dict) else None
        result: dict[str, Any] = found if isinstance(found, dict) else {}
        kind = result.get("type")
        if kind == "succeeded" and isinstance(result.get("message"), dict):
            return dict(result["message"])
        if kind == "errored":
            error: dict[str, Any] = result["error"] if isinstance(result.get("error"), dict) else {}
            inner: dict[str, Any] = error["error"] if isinstance(error.get("error"), dict) else error
            code = _ERROR_KINDS.get(str(inner.get("type")), "server_error")
            return ModelError(code, f"provider batch {batch.id}: {str(inner.get('message') or inner.get('type'))[:500]}")
        if kind in ("canceled", "expired"):
            word = "cancelled" if kind == "canceled" else "expired"
            return ModelError(f"batch_{word}", f"provider batch {batch.id} ended {word} before answering this call")
        return ModelError(f"batch_{batch.status}", f"provider batch {batch.id} ended {batch.status} without an answer for this call")

    async def close(self) -> None:
        await self._client.close()

    async def _json(self, method: str, path: str, body: Any = None, params: dict[str, Any] | None = None) -> dict[str, Any]:
        from runner.model.anthropic_client import json_body

        response = await self._raw(method, path, body, params)
        try:
            return json_body(response)
        except ValueError as exc:
            raise ModelError("invalid_response", f"{method} {path}: {exc}") from None

    async def _raw(self, method: str, path: str, body: Any = None, params: dict[str, Any] | None = None) -> Any:
        """One call; an endpoint failure becomes a :class:`ModelError` (redacted, nothing chained)."""
        from runner.model.anthropic_client import ENDPOINT_EXCEPTIONS, HttpResponse, classify

        options: Any = {"params": params} if params else {}
        try:
            if method == "GET":
                return await self._client.get(path, cast_to=HttpResponse, options=options)
            return await self._client.post(path, body=body, cast_to=HttpResponse)
        except ENDPOINT_EXCEPTIONS as exc:
            fault = classify(exc, self._secrets)
        raise fault.to_error(1)
