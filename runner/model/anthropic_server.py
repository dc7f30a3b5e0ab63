"""A strict loopback server speaking Anthropic's Messages and Message Batches APIs, from a script.

For tests that must go through real HTTP and the real ``anthropic`` SDK::

    with AnthropicServer(Script.from_obj(...), api_key="sk-ant-test") as srv:
        model = AnthropicChatModel("claude-sonnet-4-5", base_url=srv.base_url, api_key="sk-ant-test")

It answers as Anthropic documents, refusing what the real API refuses:

- every request needs the ``anthropic-version`` header (else 400) and the ``x-api-key`` the
  server was given (else 401 ``authentication_error``); errors are
  ``{"type": "error", "error": {"type": ..., "message": ...}}``;
- ``POST /v1/messages``: the body checks of :mod:`runner.model.anthropic_protocol`, then (with the
  ``anthropic`` package installed) the SDK's own request types (:mod:`runner.model.anthropic_conformance`:
  a field of the wrong type, or one the API does not define, is a 400); the reply
  is the script's (matched on the request in Chat Completions shape), as a ``message`` with
  ``tool_use`` blocks and usage. Its prompt cache is real: a prefix marked with ``cache_control``
  of at least ``min_cache_tokens`` is written the first time (``cache_creation_input_tokens``)
  and read after (``cache_read_input_tokens``);
- Message Batches: ``POST /v1/messages/batches`` (``requests: [{custom_id, params}]``, unique
  ``custom_id`` of 1-64 letters, digits, ``_`` or ``-``, at most ``max_requests`` (100,000) requests and
  ``max_bytes`` (256 MB)), ``GET /v1/messages/batches`` (newest first, ``limit``, ``after_id``),
  ``GET /v1/messages/batches/{id}`` (``processing_status`` ``in_progress``, ``canceling``,
  ``ended``; ``request_counts``), ``POST /v1/messages/batches/{id}/cancel`` and
  ``GET /v1/messages/batches/{id}/results`` (JSONL ``{custom_id, result}`` with ``succeeded``,
  ``errored``, ``canceled`` or ``expired`` results; 400 before the batch has ended). A batch
  ends at its ``polls``-th retrieve (:class:`~runner.model.batch_endpoints.BatchBehaviour`:
  ``outcome``, ``partial``, ``hold`` at ``create``, ``created``, ``output`` or ``cancel``).
  Each request's ``params`` is checked like a live request: a bad one is an ``errored`` result.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any

from runner.model.anthropic_conformance import messages_problem
from runner.model.anthropic_protocol import cached_prefix, chat_body, error_body, message_from, problems
from runner.model.batch_endpoints import BatchBehaviour
from runner.model.script_rules import NoRuleMatched, Script
from runner.model.server import RecordedRequest, ScriptedServer

if TYPE_CHECKING:
    from runner.core.usage import Usage

MAX_BATCH_REQUESTS = 100_000
MAX_BATCH_BYTES = 256_000_000
_CUSTOM_ID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


@dataclass
class MessageBatch:
    """One Message Batch as the server holds it."""

    id: str
    requests: list[dict[str, Any]]
    created_at: float
    status: str = "in_progress"
    polls: int = 0
    results: list[dict[str, Any]] = field(default_factory=list)
    cancel_at: float | None = None
    ended_at: float | None = None

    def as_dict(self, base_url: str) -> dict[str, Any]:
        kinds = [r["result"]["type"] for r in self.results]
        counts = {k: kinds.count(k) for k in ("succeeded", "errored", "canceled", "expired")}
        ended = self.status == "ended"
        return {
            "id": self.id, "type": "message_batch", "processing_status": self.status,
            "request_counts": {"processing": 0 if ended else len(self.requests), **counts},
            "created_at": _stamp(self.created_at), "expires_at": _stamp(self.created_at + 86400),
            "ended_at": _stamp(self.ended_at), "cancel_initiated_at": _stamp(self.cancel_at), "archived_at": None,
            "results_url": f"{base_url}/v1/messages/batches/{self.id}/results" if ended else None,
        }  # fmt: skip


def _stamp(at: float | None) -> str | None:
    return datetime.fromtimestamp(at, UTC).isoformat().replace("+00:00", "Z") if at is not None else None


class AnthropicServer(ScriptedServer):
    """The strict Anthropic endpoint on ``127.0.0.1``; a context manager (see the module doc)."""

    def __init__(
        self, script: Script | dict[str, Any] | list[Any] | None = None, *, api_key: str = "sk-ant-test",
        batch: BatchBehaviour | None = None, min_cache_tokens: int = 1024, max_requests: int = MAX_BATCH_REQUESTS,
        max_bytes: int = MAX_BATCH_BYTES, host: str = "127.0.0.1", port: int = 0,
    ) -> None:
        super().__init__(script, host=host, port=port, api_key=api_key)
        self.behaviour = batch or BatchBehaviour()
        self.min_cache_tokens, self.max_requests, self.max_bytes = min_cache_tokens, max_requests, max_bytes
        self.message_batches: dict[str, MessageBatch] = {}
        self._cached: set[str] = set()
        self._ids = itertools.count(1)
        self._state = threading.Condition()
        self._holding: dict[str, int] = {}
        self._drop = False
        self._ending = threading.Lock()
        self._creates = 0

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT`` (the SDK adds ``/v1``)."""
        return super().base_url.removesuffix("/v1")

    def start(self) -> AnthropicServer:
        from runner.model.server import _HTTPServer

        self._httpd = _HTTPServer(self._address, self)
        self._httpd.RequestHandlerClass = _AnthropicHandler
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def __enter__(self) -> AnthropicServer:
        return self.start()

    def close(self) -> None:
        self.release()
        super().close()

    # --- holds (tests kill a client at a named point) -----------------------------------

    def holding(self, point: str) -> int:
        with self._state:
            return self._holding.get(point, 0)

    def release(self, *, drop: bool = False) -> None:
        with self._state:
            self.behaviour = BatchBehaviour(polls=self.behaviour.polls, outcome=self.behaviour.outcome, partial=self.behaviour.partial)
            self._drop = drop
            self._state.notify_all()

    def _hold(self, point: str) -> bool:
        """Wait at ``point`` when the behaviour holds there; ``False``: released with ``drop``."""
        with self._state:
            if point not in self.behaviour.hold or len(self.message_batches) < self.behaviour.hold_after:
                return True
            self._holding[point] = self._holding.get(point, 0) + 1
            while point in self.behaviour.hold and not self.closing.is_set():
                self._state.wait(0.05)
            self._holding[point] -= 1
            return not self._drop

    # --- messages -----------------------------------------------------------------------

    def message(self, body: dict[str, Any]) -> tuple[int, dict[str, Any], str]:
        """``(status, answer, rule)`` for one Messages request (live, or a batch's ``params``)."""
        problem = problems(body) or messages_problem(body)  # the SDK's own types, where installed
        if problem is not None:
            return 400, error_body(400, problem), "invalid-request"
        try:
            match = self.script.next(chat_body(body))
        except NoRuleMatched as exc:
            return 400, error_body(400, str(exc)), "no-match"
        fault = match.reply.fault
        if fault is not None:
            text = fault.body if isinstance(fault.body, str) else f"scripted fault: HTTP {fault.status}"
            return fault.status, error_body(fault.status, text), match.rule
        answer = message_from(match.reply, body, match.serial, match.tokenizer, (0, 0))
        answer["usage"] = self._cache_usage(body, answer["usage"])
        self.bill({"model": answer["model"], "usage": answer["usage"]})
        return 200, answer, match.rule

    @staticmethod
    def parse_usage(usage: dict[str, Any]) -> Usage:
        from runner.model.anthropic_wire import parse_usage

        return parse_usage(usage)

    def _cache_usage(self, body: dict[str, Any], usage: dict[str, Any]) -> dict[str, Any]:
        prefix = cached_prefix(body)
        if prefix is None:
            return usage
        tokens = min(len(prefix) // 4, usage["input_tokens"])
        if tokens < self.min_cache_tokens:
            return usage
        key = hashlib.sha256(f"{body.get('model')}\0{prefix}".encode()).hexdigest()
        with self._lock:
            hit = key in self._cached
            self._cached.add(key)
        field_name = "cache_read_input_tokens" if hit else "cache_creation_input_tokens"
        return {**usage, "input_tokens": usage["input_tokens"] - tokens, field_name: tokens}

    # --- message batches ----------------------------------------------------------------

    def create_batch(self, body: dict[str, Any] | None, size: int) -> tuple[int, Any]:
        requests = body.get("requests") if body is not None else None
        if body is None or set(body) != {"requests"} or not isinstance(requests, list) or not requests:
            return 400, error_body(400, "requests: Field required (a non-empty list of {custom_id, params}), and nothing else")
        if len(requests) > self.max_requests or size > self.max_bytes:
            return 413, error_body(413, f"a batch holds at most {self.max_requests} requests and {self.max_bytes} bytes")
        seen: set[str] = set()
        for index, request in enumerate(requests):
            if not isinstance(request, dict) or set(request) != {"custom_id", "params"} or not isinstance(request["params"], dict):
                return 400, error_body(400, f"requests.{index}: each request is {{custom_id, params}}")
            custom_id = request["custom_id"]
            if not isinstance(custom_id, str) or not _CUSTOM_ID.match(custom_id):
                return 400, error_body(400, f"requests.{index}.custom_id: String should match pattern '^[a-zA-Z0-9_-]{{1,64}}$'")
            if custom_id in seen:
                return 400, error_body(400, f"requests.{index}.custom_id: duplicate custom_id {custom_id!r}")
            seen.add(custom_id)
        if not self._hold("create"):
            return 503, error_body(529, "dropped")
        with self._lock:
            self._creates += 1
            if self._creates <= self.behaviour.refuse_creates:
                return 429, error_body(429, "Number of batch requests exceeds the rate limit for your organization")
            batch = MessageBatch(f"msgbatch_{next(self._ids):06d}", requests, time.time())
            self.message_batches[batch.id] = batch
            created = batch.as_dict(self.base_url)
        self._hold("created")
        return 200, created

    def batch(self, batch_id: str) -> tuple[int, Any]:
        with self._ending:  # one retrieve at a time ends a batch
            with self._lock:
                batch = self.message_batches.get(batch_id)
                if batch is None:
                    return 404, error_body(404, f"no message batch {batch_id}")
                ends = False
                if batch.status != "ended":
                    batch.polls += 1
                    ends = batch.status == "canceling" or batch.polls >= self.behaviour.polls
            if ends:
                self._end(batch)  # answers from the script (which bills, under the lock)
            with self._lock:
                return 200, batch.as_dict(self.base_url)

    def _end(self, batch: MessageBatch) -> None:
        outcome = "canceled" if batch.status == "canceling" else {"cancelled": "canceled", "expired": "expired"}.get(self.behaviour.outcome)
        answered = len(batch.requests) if outcome is None else self.behaviour.partial
        results = []
        for index, request in enumerate(batch.requests):
            if index < answered:
                status, answer, _ = self.message(request["params"])
                if status == 200:
                    answer["usage"]["service_tier"] = "batch"  # as Anthropic answers a Message Batch's request
                result: dict[str, Any] = {"type": "succeeded", "message": answer} if status == 200 else {"type": "errored", "error": answer}
            else:
                result = {"type": outcome}
            results.append({"custom_id": request["custom_id"], "result": result})
        results += [{**results[0], "custom_id": f"stray-{n}"} for n in range(1, self.behaviour.stray_lines + 1)]
        with self._lock:
            batch.results, batch.status, batch.ended_at = results, "ended", time.time()

    def list_batches(self, query: dict[str, str]) -> tuple[int, Any]:
        with self._lock:
            ordered = sorted(self.message_batches.values(), key=lambda b: b.id, reverse=True)
            if "after_id" in query:
                ordered = [b for b in ordered if b.id < query["after_id"]]
            limit = min(max(int(query.get("limit", "20") or 20), 1), 1000)
            page = [b.as_dict(self.base_url) for b in ordered[:limit]]
        return 200, {"data": page, "has_more": len(ordered) > limit, "first_id": page[0]["id"] if page else None,
                     "last_id": page[-1]["id"] if page else None}  # fmt: skip

    def cancel_batch(self, batch_id: str) -> tuple[int, Any]:
        if not self._hold("cancel"):
            return 503, error_body(529, "dropped")
        with self._lock:
            batch = self.message_batches.get(batch_id)
            if batch is None:
                return 404, error_body(404, f"no message batch {batch_id}")
            if batch.status == "in_progress":
                batch.status, batch.cancel_at = "canceling", time.time()
            return 200, batch.as_dict(self.base_url)

    def results(self, batch_id: str) -> tuple[int, Any]:
        with self._lock:
            batch = self.message_batches.get(batch_id)
            if batch is None:
                return 404, error_body(404, f"no message batch {batch_id}")
            if batch.status != "ended":
                return 400, error_body(400, f"Batch {batch_id} has not ended yet; its results are not available")
            text = "".join(json.dumps(r) + "\n" for r in batch.results).encode()
        if not self._hold("output"):
            return 503, error_body(529, "dropped")
        return 200, text


class _AnthropicHandler(BaseHTTPRequestHandler):
    server: Any
    protocol_version = "HTTP/1.0"
    timeout = 10

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def _serve(self, method: str) -> None:
        owner: AnthropicServer = self.server.owner
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0)) if method == "POST" else b""
        route, _, query_text = self.path.partition("?")
        route = route.rstrip("/")
        body = _json_object(raw) if method == "POST" else None
        refused = self._refused(owner)
        if refused is not None:
            owner.record(self, body, "refused")
            return self._send_json(*refused)
        parts = route.split("/")[1:]  # ['v1', 'messages', 'batches', id, 'results']
        status: int
        answer: Any
        if parts == ["v1", "messages"] and method == "POST":
            status, answer, rule = (400, error_body(400, "body is not a JSON object"), "invalid-request") if body is None else owner.message(body)
        elif parts == ["v1", "messages", "batches"] and method == "POST":
            (status, answer), rule = owner.create_batch(body, len(raw)), "batches"
        elif parts == ["v1", "messages", "batches"] and method == "GET":
            (status, answer), rule = owner.list_batches(dict(urllib.parse.parse_qsl(query_text))), "batches"
        elif parts[:3] == ["v1", "messages", "batches"] and len(parts) == 4 and method == "GET":
            (status, answer), rule = owner.batch(parts[3]), "batch"
        elif parts[:3] == ["v1", "messages", "batches"] and parts[4:] == ["cancel"] and method == "POST":
            (status, answer), rule = owner.cancel_batch(parts[3]), "cancel"
        elif parts[:3] == ["v1", "messages", "batches"] and parts[4:] == ["results"] and method == "GET":
            (status, answer), rule = owner.results(parts[3]), "results"
        else:
            status, answer, rule = 404, error_body(404, f"no route {method} {route}"), "no-route"
        owner.record(self, body, rule)
        if isinstance(answer, bytes):
            return self._send(status, answer, "application/binary")
        self._send_json(status, answer)

    def _refused(self, owner: AnthropicServer) -> tuple[int, dict[str, Any]] | None:
        if not self.headers.get("anthropic-version"):
            return 400, error_body(400, "anthropic-version: header is required")
        key = self.headers.get("x-api-key")
        if not key:
            return 401, error_body(401, "x-api-key header is required")
        if key != owner.api_key:
            return 401, error_body(401, "invalid x-api-key")
        return None

    def _send_json(self, status: int, data: object) -> None:
        self._send(status, json.dumps(data).encode(), "application/json")

    def _send(self, status: int, payload: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        if status == 529 or status == 429:
            self.send_header("retry-after", "0")
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:
        """Requests are recorded instead."""


def _json_object(raw: bytes) -> dict[str, Any] | None:
    try:
        body = json.loads(raw)
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


__all__ = ["AnthropicServer", "MessageBatch", "RecordedRequest"]
