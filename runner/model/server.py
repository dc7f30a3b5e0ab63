"""A real loopback HTTP server speaking the OpenAI Chat Completions protocol, from a script.

For tests and demos that must go through real HTTP and the real openai SDK::

    with ScriptedServer(Script.load("script.yaml")) as srv:
        model = OpenAIChatModel("scripted", base_url=srv.base_url, api_key="sk-test")
        ...
        assert srv.requests[0].auth_fingerprint == ScriptedServer.key_fingerprint("sk-test")

or as a process (prints the base URL as its first line, serves until killed)::

    python -m runner.model.server --script script.yaml [--port 8000] [--record requests.jsonl]

Every chat request body and batch line body is checked against the ``openai`` package's
request types (:mod:`runner.model.strict_openai`) and answered 400 as the API would when it
does not conform; ``strict=True`` (``--strict``) also refuses what OpenAI refuses per model
(``max_tokens`` or ``temperature`` on a reasoning model, ...).

Endpoints: ``POST /v1/chat/completions`` (JSON or, with ``"stream": true``, server-sent
events, with a final usage chunk when ``stream_options.include_usage``),
the Files and Batch APIs (:mod:`runner.model.batch_endpoints`, each batch line answered
from the script; ``batch=BatchBehaviour(...)`` sets when and how batches end),
``POST /v1/embeddings`` (deterministic bag-of-words vectors, :func:`hashed_embedding`: texts
sharing words are close, so retrieval can be tested for real) and ``GET /v1/models``. Replies, faults, delays and hangs come from the rules described in
:mod:`runner.model.script_rules`. Each request is recorded with its JSON body and headers;
credentials (``Authorization``, ``api-key``, cookies) are never stored, only whether
one was sent and a short SHA-256 fingerprint of it. ``ScriptedServer(..., api_key="sk-...")``
answers every request without that bearer key with OpenAI's 401 ``invalid_api_key``.

Requests are served on threads (one per connection, HTTP/1.0, so no idle keep-alive);
closing the server wakes every pending delay or hang at once.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import re
import signal
import sys
import threading
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runner.errors import ConfigError
from runner.model.batch_endpoints import BatchBehaviour, BatchEndpoints
from runner.model.replies import INVALID_JSON_BODY, HttpFault, completion_chunks
from runner.model.script_rules import Match, NoRuleMatched, Script

if TYPE_CHECKING:
    from runner.config.specs import Price
    from runner.core.usage import Usage

_SECRET_HEADERS = frozenset({"authorization", "proxy-authorization", "api-key", "x-api-key", "cookie"})


CLOSE_SECONDS = 30.0  # how long ``close`` waits for handlers, once pending waits are woken


@dataclass(frozen=True)
class RecordedRequest:
    """One request as received, without credentials."""

    method: str
    path: str
    body: Any
    headers: dict[str, str]
    auth_present: bool
    auth_fingerprint: str | None
    rule: str


class ScriptedServer:
    """The scripted endpoint on ``127.0.0.1`` and an ephemeral port; a context manager."""

    def __init__(
        self,
        script: Script | dict[str, Any] | list[Any] | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        record_path: str | Path | None = None,
        batch: BatchBehaviour | None = None,
        api_key: str | None = None,
        strict: bool = False,
        flex_unavailable: int = 0,
    ) -> None:
        """``strict``: also refuse what OpenAI refuses per model (:func:`~runner.model.strict_openai.model_error`);
        every body is checked against the API's request types either way. ``flex_unavailable``: the
        first so many chat requests asking for ``service_tier: flex`` are answered as OpenAI answers
        one flex processing has no capacity for: 429 "Resource Unavailable" (not billed, no rule used)."""
        self.strict = strict
        self._flex_refusals_left = flex_unavailable
        self.script = script if isinstance(script, Script) else Script.from_obj(script or [])
        self.api_key = api_key  # when set, any other key (or none) is answered 401, as OpenAI answers a bad key
        self._address = (host, port)
        self._record_path = Path(record_path) if record_path else None
        self._requests: list[RecordedRequest] = []
        self._billed: list[tuple[str, dict[str, Any]]] = []
        self._lock = threading.Lock()
        self.closing = threading.Event()
        self.batches = BatchEndpoints(self.script, batch or BatchBehaviour(), self.bill, self.closing, self.refusal)
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1``, for ``OpenAI(base_url=...)``."""
        if self._httpd is None:
            raise RuntimeError("the server is not started")
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    @property
    def requests(self) -> list[RecordedRequest]:
        """A snapshot of the requests received so far, in arrival order."""
        with self._lock:
            return list(self._requests)

    def wait_for_requests(self, count: int, timeout_seconds: float = 10.0) -> list[RecordedRequest]:
        """The requests once ``count`` have arrived, or after ``timeout_seconds`` (a client that
        gave up on a call has still sent it; the server's thread may read it a moment later)."""
        deadline = time.monotonic() + timeout_seconds
        while len(self.requests) < count and time.monotonic() < deadline:
            time.sleep(0.01)
        return self.requests

    @property
    def billed(self) -> list[tuple[str, dict[str, Any]]]:
        """``(model, usage)`` of every completion produced, whether or not the client was still
        there to read it: what a provider would bill."""
        with self._lock:
            return list(self._billed)

    def bill(self, completion: dict[str, Any]) -> None:
        with self._lock:
            self._billed.append((str(completion.get("model")), dict(completion.get("usage") or {})))

    def billed_costs(self, prices: Mapping[str, Price] | None = None, *, batch: bool = False) -> list[tuple[str, float]]:
        """``(model, USD)`` of every completion in :attr:`billed`, at ``prices`` (default: the
        shipped prices; with ``batch``, their Batch API rates), cached and cache-write prompt
        tokens at their rates. A model without a price raises ``LookupError``."""
        from runner.config.prices import batch_price, cost_usd, default_prices, find_price

        table = dict(default_prices() if prices is None else prices)
        costs = []
        for model, usage in self.billed:
            price = find_price(table, model)
            if price is None:
                raise LookupError(f"no price for the model {model!r} the server billed")
            used = self.parse_usage(usage)
            rates = batch_price(price) if batch else price
            costs.append((model, cost_usd(rates, used.input_tokens, used.output_tokens, used.cached_input_tokens,
                                          used.cache_write_tokens)))  # fmt: skip
        return costs

    @staticmethod
    def parse_usage(usage: dict[str, Any]) -> Usage:
        """A billed completion's usage, as this server's protocol spells it."""
        from runner.model.wire import parse_usage

        return parse_usage(usage)

    def billed_usd(self, prices: Mapping[str, Price] | None = None, *, batch: bool = False, since: int = 0) -> float:
        """What the completions billed cost in USD, from the ``since``-th on (:meth:`billed_costs`):
        what a provider would charge, to hold against a cap or a recorded cost."""
        return sum(usd for _, usd in self.billed_costs(prices, batch=batch)[since:])

    def refusal(self, body: dict[str, Any]) -> dict[str, Any] | None:
        """The API's 400 error body for ``body`` (a chat request or a batch line's body), or ``None``."""
        from runner.model.strict_openai import conformance_error, model_error

        return conformance_error(body) or (model_error(body) if self.strict else None)

    def flex_refusal(self, body: dict[str, Any]) -> dict[str, Any] | None:
        """The 429 body for a flex request flex processing cannot serve now, or ``None`` (see ``flex_unavailable``)."""
        from runner.model.strict_openai import FLEX_UNAVAILABLE

        if body.get("service_tier") != "flex":
            return None
        with self._lock:
            if self._flex_refusals_left <= 0:
                return None
            self._flex_refusals_left -= 1
        return FLEX_UNAVAILABLE

    @staticmethod
    def key_fingerprint(key: str) -> str:
        """The fingerprint recorded for a request sent with API key ``key``."""
        return hashlib.sha256(key.encode()).hexdigest()[:16]

    def start(self) -> ScriptedServer:
        """Bind and serve in a background thread."""
        self._httpd = _HTTPServer(self._address, self)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="scripted-server", daemon=True
        )
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving: wake pending delays and hangs, wait for handler threads to end. A handler
        still running ``CLOSE_SECONDS`` later is an error, raised here, not a hang of the caller."""
        self.closing.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            stuck = self._httpd.join_handlers(CLOSE_SECONDS)
            if stuck:
                raise RuntimeError(f"{len(stuck)} request handler(s) still running {CLOSE_SECONDS:g} s after close")
        if self._thread is not None:
            self._thread.join(timeout=10)

    def __enter__(self) -> ScriptedServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def record(self, handler: BaseHTTPRequestHandler, body: Any, rule: str) -> None:
        """Store one request (credentials replaced by a fingerprint)."""
        headers = {k.lower(): v for k, v in handler.headers.items()}
        secret = headers.get("authorization") or headers.get("api-key") or headers.get("x-api-key")
        token = secret.removeprefix("Bearer ").strip() if secret else None
        entry = RecordedRequest(
            method=handler.command,
            path=handler.path,
            body=body,
            headers={k: v for k, v in headers.items() if k not in _SECRET_HEADERS},
            auth_present=bool(token),
            auth_fingerprint=self.key_fingerprint(token) if token else None,
            rule=rule,
        )
        with self._lock:
            self._requests.append(entry)
            if self._record_path is not None:
                with self._record_path.open("a", encoding="utf-8") as out:
                    out.write(json.dumps(asdict(entry)) + "\n")


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True  # a stuck handler cannot hold the interpreter's exit ...
    block_on_close = False  # ... and ``join_handlers`` waits for the others, within a deadline
    request_queue_size = 256  # batch runs open dozens of connections at once

    def __init__(self, address: tuple[str, int], owner: ScriptedServer) -> None:
        super().__init__(address, _Handler)
        self.owner = owner
        self._handlers: list[threading.Thread] = []
        self._handlers_lock = threading.Lock()

    def process_request(self, request: Any, client_address: Any) -> None:
        thread = threading.Thread(target=self.process_request_thread, args=(request, client_address), daemon=True)
        with self._handlers_lock:
            self._handlers = [t for t in self._handlers if t.is_alive()]
            self._handlers.append(thread)
        thread.start()

    def join_handlers(self, seconds: float) -> list[threading.Thread]:
        """Wait up to ``seconds`` in all for the handler threads; the ones still running."""
        deadline = time.monotonic() + seconds
        with self._handlers_lock:
            handlers = list(self._handlers)
        for thread in handlers:
            thread.join(max(0.0, deadline - time.monotonic()))
        return [t for t in handlers if t.is_alive()]

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that gave up (timeout) before we answered is expected, not an error.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    server: _HTTPServer
    protocol_version = "HTTP/1.0"
    timeout = 10  # a connection that never sends a request cannot hold shutdown forever

    def do_GET(self) -> None:
        owner = self.server.owner
        if self._unauthorized():
            return
        route = self._route()
        if route == "/v1/files" or route.startswith(("/v1/files/", "/v1/batches")):
            return self._batch_api("GET", route)
        if route != "/v1/models":
            return self._send_json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
        owner.record(self, None, "models")
        models = [{"id": m, "object": "model", "created": 0, "owned_by": "runner"} for m in owner.script.models]
        self._send_json(200, {"object": "list", "data": models})

    def do_DELETE(self) -> None:
        if self._unauthorized():
            return
        if self._route().startswith("/v1/files/"):
            return self._batch_api("DELETE", self._route())
        self.server.owner.record(self, None, "no-route")
        self._send_json(404, {"error": {"message": f"no route DELETE {self.path}", "type": "not_found"}})

    def _as_served(self, body: dict[str, Any]) -> dict[str, Any]:
        """``body`` as the model that serves it is asked (an Azure deployment names its model)."""
        return body

    def do_POST(self) -> None:
        owner = self.server.owner
        if self._unauthorized():
            return
        if self._route() == "/v1/files" or self._route().startswith("/v1/batches"):
            return self._batch_api("POST", self._route())
        if self._route() in ("/v1/embeddings", "/embeddings"):
            return self._embeddings()
        if self._route() not in ("/v1/chat/completions", "/chat/completions"):
            return self._send_json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = _json_object(raw)
        if body is None:
            owner.record(self, raw.decode(errors="replace"), "invalid-request")
            return self._send_json(400, {"error": {"message": "body is not a JSON object", "type": "bad_request"}})
        refused = owner.refusal(self._as_served(body))
        if refused is not None:
            owner.record(self, body, "refused")
            return self._send_json(400, refused)
        unavailable = owner.flex_refusal(self._as_served(body))
        if unavailable is not None:
            owner.record(self, body, "flex-unavailable")
            return self._send_json(429, unavailable)
        try:
            match = owner.script.next(body)
        except NoRuleMatched as exc:
            owner.record(self, body, "no-match")
            return self._send_json(400, {"error": {"message": str(exc), "type": "bad_request"}})
        owner.record(self, body, match.rule)
        self._answer(body, match)

    def _unauthorized(self) -> bool:
        """Answer 401 (OpenAI's ``invalid_api_key``) when the server wants a key and this request
        does not carry it; the request is recorded with rule ``unauthorized``."""
        wanted = self.server.owner.api_key
        if wanted is None or self.headers.get("Authorization") == f"Bearer {wanted}":
            return False
        if self.command == "POST":
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.owner.record(self, None, "unauthorized")
        error = {"message": "Incorrect API key provided.", "type": "invalid_request_error", "code": "invalid_api_key"}
        self._send_json(401, {"error": {**error, "param": None}})
        return True

    def _batch_api(self, method: str, route: str) -> None:
        """The files and batches endpoints (:class:`~runner.model.batch_endpoints.BatchEndpoints`)."""
        endpoints = self.server.owner.batches
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0)) if method == "POST" else b""
        parts = route.split("/")[2:]  # ['files'] | ['files', id] | ['files', id, 'content'] | ['batches', ...]
        status: int
        answer: Any
        if parts == ["files"] and method == "POST":
            status, answer = endpoints.upload(self.headers.get("Content-Type") or "", raw)
            body: Any = {"multipart": len(raw)}
        elif parts == ["files"] and method == "GET":
            query = dict(urllib.parse.parse_qsl(self.path.partition("?")[2]))
            status, answer, body = *endpoints.list_files(query), None
        elif parts[0] == "files" and method == "DELETE" and len(parts) == 2:
            status, answer, body = *endpoints.delete_file(parts[1]), None
        elif parts[0] == "files" and method == "GET" and len(parts) in (2, 3) and parts[2:] in ([], ["content"]):
            status, answer = endpoints.file(parts[1], content=parts[2:] == ["content"])
            body = None
        elif parts == ["batches"] and method == "POST":
            body = _json_object(raw)
            status, answer = endpoints.create(body)
        elif parts == ["batches"] and method == "GET":
            query = dict(urllib.parse.parse_qsl(self.path.partition("?")[2]))
            status, answer, body = *endpoints.list(query), None
        elif parts[0] == "batches" and len(parts) == 2 and method == "GET":
            status, answer, body = *endpoints.retrieve(parts[1]), None
        elif parts[0] == "batches" and parts[2:] == ["cancel"] and method == "POST":
            status, answer, body = *endpoints.cancel(parts[1]), None
        else:
            status, answer, body = 404, {"error": {"message": f"no route {method} {self.path}", "type": "not_found"}}, None
        self.server.owner.record(self, body, "/".join(parts[:1] + parts[2:]) or "batch-api")
        if isinstance(answer, bytes):
            return self._send(status, answer, "application/octet-stream")
        self._send_json(status, answer)

    def _embeddings(self) -> None:
        """The OpenAI embeddings response for ``input`` (a string or a list of strings)."""
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = _json_object(raw)
        texts = body.get("input") if body else None
        if isinstance(texts, str):
            texts = [texts]
        if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
            self.server.owner.record(self, body, "invalid-request")
            return self._send_json(400, {"error": {"message": "input must be a string or a list of strings", "type": "bad_request"}})
        assert body is not None
        self.server.owner.record(self, body, "embeddings")
        data = [{"object": "embedding", "index": i, "embedding": hashed_embedding(t)} for i, t in enumerate(texts)]
        tokens = sum(len(t.split()) for t in texts)
        usage = {"prompt_tokens": tokens, "total_tokens": tokens}
        self._send_json(200, {"object": "list", "data": data, "model": body.get("model", "scripted"), "usage": usage})

    def _answer(self, body: dict[str, Any], match: Match) -> None:
        reply, closing = match.reply, self.server.owner.closing
        if reply.hang_seconds:
            closing.wait(reply.hang_seconds)
            self.close_connection = True  # send nothing at all
            return
        if reply.latency_seconds and closing.wait(reply.latency_seconds):
            return
        if reply.fault is not None:
            if reply.fault.billed:
                self.server.owner.bill(reply.completion(body, match.serial, match.tokenizer))
            return self._send_fault(reply.fault)
        stream_options = body.get("stream_options") or {}
        completion = reply.completion(body, match.serial, match.tokenizer)
        self.server.owner.bill(completion)
        if body.get("stream"):
            return self._send_stream(completion, reply.invalid_json, stream_options)
        if reply.invalid_json:
            return self._send(200, INVALID_JSON_BODY.encode(), "application/json")
        self._send_json(200, completion)

    def _send_fault(self, fault: HttpFault) -> None:
        payload, content_type = fault.body_bytes()
        headers = list(fault.headers)
        if fault.retry_after is not None:
            headers.append(("Retry-After", f"{fault.retry_after:g}"))
        self._send(fault.status, payload, content_type, headers)

    def _send_stream(self, completion: dict[str, Any], invalid_json: bool, stream_options: dict[str, Any]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        chunks = completion_chunks(completion, include_usage=bool(stream_options.get("include_usage")))
        events = [f"data: {json.dumps(chunk)}\n\n" for chunk in chunks]
        if invalid_json:
            events = [*events[:1], f"data: {INVALID_JSON_BODY}\n\n"]
        for event in [*events, "data: [DONE]\n\n"]:
            self.wfile.write(event.encode())
            self.wfile.flush()

    def _send_json(self, status: int, data: object) -> None:
        self._send(status, json.dumps(data).encode(), "application/json")

    def _send(self, status: int, payload: bytes, content_type: str, headers: Sequence[tuple[str, str]] = ()) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(payload)

    def _route(self) -> str:
        return self.path.split("?", 1)[0].rstrip("/")

    def log_message(self, format: str, *args: Any) -> None:
        """Silence per-request logging; requests are recorded instead."""


EMBEDDING_DIMENSIONS = 256
_WORD = re.compile(r"\w+")


def hashed_embedding(text: str, dimensions: int = EMBEDDING_DIMENSIONS) -> list[float]:
    """A unit vector of ``text``'s words (lower case, a trailing ``s`` dropped), each hashed
    to a dimension and a sign: a stand-in embedding model that needs no weights."""
    vector = [0.0] * dimensions
    for word in _WORD.findall(text.lower()):
        stem = word[:-1] if len(word) > 3 and word.endswith("s") else word
        digest = hashlib.sha256(stem.encode()).digest()
        vector[int.from_bytes(digest[:4], "big") % dimensions] += 1.0 if digest[4] & 1 else -1.0
    norm = math.sqrt(sum(x * x for x in vector)) or 1.0
    return [x / norm for x in vector]


def _json_object(raw: bytes) -> dict[str, Any] | None:
    try:
        body = json.loads(raw)
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


def main(argv: list[str] | None = None) -> int:
    """Serve a script until SIGINT/SIGTERM; print the base URL first."""
    parser = argparse.ArgumentParser(prog="python -m runner.model.server", description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--script", help="YAML or JSON script file (default: always answer 'OK')")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--record", help="append each request as a JSON line to this file")
    parser.add_argument("--batch-polls", type=int, default=2, help="retrieves before a batch ends (at least 1)")
    parser.add_argument("--batch-outcome", choices=["completed", "expired", "cancelled"], default="completed")
    parser.add_argument("--strict", action="store_true", help="answer 400 to what OpenAI refuses per model (max_tokens, temperature on o-series ...)")
    parser.add_argument("--flex-unavailable", type=int, default=0, metavar="N",
                        help="answer the first N flex requests 429 Resource Unavailable, as OpenAI does when flex has no capacity")
    args = parser.parse_args(argv)
    try:
        script = Script.load(args.script) if args.script else Script()
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    if args.batch_polls < 1:
        print("error: --batch-polls must be at least 1", file=sys.stderr)
        return 2
    batch = BatchBehaviour(polls=args.batch_polls, outcome=args.batch_outcome)
    with ScriptedServer(script, host=args.host, port=args.port, record_path=args.record, batch=batch, strict=args.strict,
                        flex_unavailable=args.flex_unavailable) as server:
        print(server.base_url, flush=True)
        try:
            while not stop.wait(0.2):
                pass
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
