"""The OpenAI Files and Batch APIs of the loopback server, answering each batch line from the script.

Implements, as OpenAI documents them:

- ``POST /v1/files`` (multipart: ``file``, ``purpose``), ``GET /v1/files`` (newest first,
  ``purpose``, ``limit``, ``after``, ``order``), ``GET /v1/files/{id}``, ``GET /v1/files/{id}/content``
  and ``DELETE /v1/files/{id}``;
- ``POST /v1/batches`` (``input_file_id``, ``endpoint``, ``completion_window``, ``metadata``),
  ``GET /v1/batches`` (newest first, ``limit`` and ``after``, each with its ``metadata``),
  ``GET /v1/batches/{id}`` and ``POST /v1/batches/{id}/cancel``.

A batch moves ``validating -> in_progress -> completed`` as it is retrieved: it is
``validating`` when created, ``in_progress`` from the first retrieve, and finishes at the
``polls``-th retrieve (:class:`BatchBehaviour`). At the end every input line is answered by
the script like a live request: a completion goes to the output file
(``{"custom_id", "response": {"status_code": 200, "body"}}``), a scripted fault to the
error file with its status code (a partial failure). ``outcome: expired`` ends the batch
``expired`` instead, every line in the error file with code ``batch_expired``;
``outcome: cancelled`` ends it ``cancelled`` (as if cancelled by someone else), as does
``POST .../cancel`` (``cancelling`` until the next retrieve). A batch that ends expired or
cancelled has answered its first ``partial`` lines (billed, in the output file) and none of
the others. An input file that is not valid JSONL of ``{custom_id, method, url, body}``
lines with unique ids for the batch's endpoint, with more than ``max_requests`` lines, or of more
than ``max_bytes`` (OpenAI: 50,000 requests and 200 MB a batch), fails the batch at validation (``status: failed`` with ``errors``). Deleting the input file
of a batch that has not ended fails that batch when it would have ended (``input_file_deleted``):
:attr:`BatchEndpoints.deleted_in_use` lists such deletions, which a client must never make.

``hold`` stops requests at named points until :meth:`BatchEndpoints.release` (tests kill a
client there): ``upload`` (before a file is stored), ``create`` (before a batch is
created), ``created`` (after it is created, before the reply), ``output`` (before an output
or error file is served), ``cancel`` (before a batch is cancelled). Released with ``drop=True``, a request held before it did its work
fails instead (HTTP 503), as if it had never arrived.
"""

from __future__ import annotations

import email.parser
import email.policy
import itertools
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from runner.model.script_rules import NoRuleMatched, Script

Outcome = Literal["completed", "expired", "cancelled"]
ENDPOINTS = ("/v1/chat/completions",)
WINDOWS = ("24h",)


HOLD_POINTS = frozenset({"upload", "create", "created", "output", "cancel"})
_ENDED = frozenset({"completed", "failed", "expired", "cancelled"})


@dataclass(frozen=True)
class BatchBehaviour:
    """How the server's batches end: after ``polls`` retrieves, with ``outcome``; see the module doc."""

    polls: int = 2
    outcome: Outcome = "completed"
    partial: int = 0  # lines answered by a batch that ends expired or cancelled
    max_requests: int | None = None  # a larger input file fails validation
    max_bytes: int | None = None  # so does a bigger one
    hold: frozenset[str] = frozenset()  # points where requests wait for release()
    hold_after: int = 0  # hold only once this many batches exist (e.g. 1: from the second batch's upload)
    refuse_creates: int = 0  # the first N batch creates are refused (400), as a provider refuses one over a limit
    fail_deletes: int = 0  # the first N file deletes fail (500)
    cancel_polls: int = 1  # retrieves a cancelled batch stays ``cancelling`` (OpenAI: up to 10 minutes)
    stray_lines: int = 0  # a finished batch's results also answer this many requests it was not sent (``stray-N``)

    def __post_init__(self) -> None:
        if self.polls < 1:
            raise ValueError("polls must be at least 1")
        if not self.hold <= HOLD_POINTS:
            raise ValueError(f"hold points are {sorted(HOLD_POINTS)}")


@dataclass
class _File:
    id: str
    filename: str
    purpose: str
    content: bytes
    created_at: int
    deleted: bool = False  # DELETE /v1/files/{id}: gone for clients, kept for tests to read

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id, "object": "file", "bytes": len(self.content), "created_at": self.created_at,
            "filename": self.filename, "purpose": self.purpose, "status": "processed",
        }  # fmt: skip


@dataclass
class _Batch:
    id: str
    input_file_id: str
    endpoint: str
    completion_window: str
    metadata: dict[str, Any] | None
    created_at: int
    status: str = "validating"
    polls: int = 0
    cancel_looks: int = 0
    total: int = 0
    completed: int = 0
    failed: int = 0
    errors: dict[str, Any] | None = None
    output_file_id: str | None = None
    error_file_id: str | None = None
    times: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        stamps = ("in_progress_at", "finalizing_at", "completed_at", "failed_at", "expired_at", "cancelling_at", "cancelled_at")
        return {
            "id": self.id, "object": "batch", "endpoint": self.endpoint, "errors": self.errors,
            "input_file_id": self.input_file_id, "completion_window": self.completion_window, "status": self.status,
            "output_file_id": self.output_file_id, "error_file_id": self.error_file_id, "created_at": self.created_at,
            "expires_at": self.created_at + 86400, **{k: self.times.get(k) for k in stamps},
            "request_counts": {"total": self.total, "completed": self.completed, "failed": self.failed},
            "metadata": self.metadata,
        }  # fmt: skip


class BatchEndpoints:
    """The files and batches a server holds (thread-safe); answers with ``(status, JSON)``."""

    def __init__(
        self, script: Script, behaviour: BatchBehaviour, bill: Callable[[dict[str, Any]], None], closing: threading.Event | None = None,
        refuse: Callable[[dict[str, Any]], dict[str, Any] | None] | None = None,
    ) -> None:
        """``refuse``: the API's error body for a line's body it would refuse, else ``None``
        (the server's conformance check: such a line is answered 400, not from the script)."""
        self.script, self.behaviour, self._bill, self.refuse = script, behaviour, bill, refuse
        self.files: dict[str, _File] = {}
        self.batches: dict[str, _Batch] = {}
        self.deleted: list[str] = []  # file ids deleted, in order (each stays in files, marked deleted)
        self.deleted_in_use: list[str] = []  # of those, the input files of batches not ended then
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._closing = closing or threading.Event()
        self._released = threading.Event()
        self._dropped = False
        self._holding: dict[str, int] = dict.fromkeys(HOLD_POINTS, 0)
        self._creates = self._deletes = 0

    # --- holding requests (tests) --------------------------------------------------------

    def holding(self, point: str) -> int:
        """How many requests have stopped at ``point`` (see ``BatchBehaviour.hold``)."""
        with self._lock:
            return self._holding[point]

    def release(self, *, drop: bool = False) -> None:
        """Let every held request, and every later one, go on (``drop``: fail without doing anything)."""
        self._dropped = drop
        self._released.set()

    def _hold(self, point: str) -> bool:
        """Wait here while ``point`` is held; ``False``: the request is dropped."""
        if point not in self.behaviour.hold or self._released.is_set() or len(self.batches) < self.behaviour.hold_after:
            return True
        with self._lock:
            self._holding[point] += 1
        while not self._released.wait(0.02) and not self._closing.is_set():
            pass
        return not self._dropped

    @property
    def batches_created(self) -> int:
        """How many batches were created (a resumed client must not create another)."""
        with self._lock:
            return len(self.batches)

    # --- files -------------------------------------------------------------------------

    def upload(self, content_type: str, raw: bytes) -> tuple[int, Any]:
        """``POST /v1/files``: a multipart form with ``file`` and ``purpose``."""
        fields = _multipart(content_type, raw)
        if fields is None or "file" not in fields or "purpose" not in fields:
            return _error(400, "expected multipart/form-data with 'file' and 'purpose'")
        filename, content = fields["file"]
        if not self._hold("upload"):
            return _error(503, "dropped")
        with self._lock:
            created = self._file(filename or "upload.jsonl", fields["purpose"][1].decode(), content)
        return 200, created.as_dict()

    def file(self, file_id: str, *, content: bool) -> tuple[int, Any]:
        """``GET /v1/files/{id}`` (``content``: ``.../content``, the raw bytes)."""
        with self._lock:
            found = self.files.get(file_id)
        if found is None or found.deleted:
            return _error(404, f"no file {file_id}")
        if content and found.purpose == "batch_output":
            self._hold("output")
        return 200, (found.content if content else found.as_dict())

    def list_files(self, query: dict[str, str]) -> tuple[int, Any]:
        """``GET /v1/files``: ``purpose``; ``order`` (``desc``, the default, or ``asc``) by creation;
        ``limit`` (1-10,000, default 10,000) after the id ``after``."""
        try:
            limit = min(max(int(query.get("limit", "10000")), 1), 10_000)
        except ValueError:
            return _error(400, "limit must be an integer")
        with self._lock:
            found = [f for f in self.files.values() if not f.deleted and query.get("purpose") in (None, f.purpose)]
            ordered = sorted(found, key=lambda f: (f.created_at, f.id), reverse=query.get("order", "desc") != "asc")
            ids = [f.id for f in ordered]
            start = ids.index(query["after"]) + 1 if query.get("after") in ids else 0
            page = [f.as_dict() for f in ordered[start : start + limit]]
            more = start + limit < len(ordered)
        first, last = (page[0]["id"], page[-1]["id"]) if page else (None, None)
        return 200, {"object": "list", "data": page, "first_id": first, "last_id": last, "has_more": more}

    def delete_file(self, file_id: str) -> tuple[int, Any]:
        """``DELETE /v1/files/{id}`` (noting a deletion under a batch that has not ended)."""
        with self._lock:
            self._deletes += 1
            if self._deletes <= self.behaviour.fail_deletes:
                return _error(500, "the file could not be deleted")
            found = self.files.get(file_id)
            if found is None or found.deleted:
                return _error(404, f"no file {file_id}")
            found.deleted = True
            self.deleted.append(file_id)
            if any(b.input_file_id == file_id and b.status not in _ENDED for b in self.batches.values()):
                self.deleted_in_use.append(file_id)
        return 200, {"id": file_id, "object": "file", "deleted": True}

    # --- batches -----------------------------------------------------------------------

    def create(self, body: dict[str, Any] | None) -> tuple[int, Any]:
        """``POST /v1/batches``."""
        if body is None:
            return _error(400, "body is not a JSON object")
        missing = [k for k in ("input_file_id", "endpoint", "completion_window") if not body.get(k)]
        if missing:
            return _error(400, f"missing required parameter(s): {', '.join(missing)}")
        if body["endpoint"] not in ENDPOINTS or body["completion_window"] not in WINDOWS:
            return _error(400, f"endpoint must be one of {ENDPOINTS} and completion_window one of {WINDOWS}")
        if not self._hold("create"):
            return _error(503, "dropped")
        with self._lock:
            self._creates += 1
            if self._creates <= self.behaviour.refuse_creates:
                return _error(400, "enqueued token limit reached for this model")
            if body["input_file_id"] not in self.files or self.files[body["input_file_id"]].deleted:
                return _error(404, f"no file {body['input_file_id']}")
            batch = _Batch(
                id=f"batch_{next(self._ids):06d}", input_file_id=str(body["input_file_id"]), endpoint=str(body["endpoint"]),
                completion_window=str(body["completion_window"]), metadata=body.get("metadata"), created_at=int(time.time()),
            )  # fmt: skip
            self.batches[batch.id] = batch
            self._validate(batch)
            created = batch.as_dict()
        self._hold("created")
        return 200, created

    def list(self, query: dict[str, str]) -> tuple[int, Any]:
        """``GET /v1/batches``: newest first, ``limit`` (1-100, default 20) after the id ``after``."""
        try:
            limit = min(max(int(query.get("limit", "20")), 1), 100)
        except ValueError:
            return _error(400, "limit must be an integer")
        with self._lock:
            ordered = sorted(self.batches.values(), key=lambda b: (b.created_at, b.id), reverse=True)
            ids = [b.id for b in ordered]
            start = ids.index(query["after"]) + 1 if query.get("after") in ids else 0
            page = [b.as_dict() for b in ordered[start : start + limit]]
            more = start + limit < len(ordered)
        first, last = (page[0]["id"], page[-1]["id"]) if page else (None, None)
        return 200, {"object": "list", "data": page, "first_id": first, "last_id": last, "has_more": more}

    def retrieve(self, batch_id: str) -> tuple[int, Any]:
        """``GET /v1/batches/{id}``: each retrieve moves an unfinished batch one step on."""
        with self._lock:
            batch = self.batches.get(batch_id)
            if batch is None:
                return _error(404, f"no batch {batch_id}")
            self._advance(batch)
            return 200, batch.as_dict()

    def cancel(self, batch_id: str) -> tuple[int, Any]:
        """``POST /v1/batches/{id}/cancel``: ``cancelling`` now, ``cancelled`` at the next retrieve."""
        if not self._hold("cancel"):
            return _error(503, "dropped")
        with self._lock:
            batch = self.batches.get(batch_id)
            if batch is None:
                return _error(404, f"no batch {batch_id}")
            if batch.status in ("validating", "in_progress"):
                batch.status = "cancelling"
                batch.times["cancelling_at"] = int(time.time())
            return 200, batch.as_dict()

    # --- the state machine (under the lock) --------------------------------------------

    def _validate(self, batch: _Batch) -> None:
        content = self.files[batch.input_file_id].content
        lines, problem = _requests(content, batch.endpoint)
        batch.total = len(lines)
        limit, size_limit = self.behaviour.max_requests, self.behaviour.max_bytes
        if problem is None and limit is not None and len(lines) > limit:
            problem = _problem("too_many_requests", f"the input file has {len(lines)} requests, more than {limit}", None)
        if problem is None and size_limit is not None and len(content) > size_limit:
            problem = _problem("file_too_large", f"the input file has {len(content)} bytes, more than {size_limit}", None)
        if problem is not None:
            batch.status, batch.errors = "failed", {"object": "list", "data": [problem]}
            batch.times["failed_at"] = int(time.time())

    def _advance(self, batch: _Batch) -> None:
        now = int(time.time())
        if batch.status == "cancelling":
            batch.cancel_looks += 1
            if batch.cancel_looks < self.behaviour.cancel_polls:
                return
            return self._finish(batch, "cancelled", "cancelled_at")
        if batch.status not in ("validating", "in_progress"):
            return
        batch.polls += 1
        if batch.status == "validating":
            batch.status = "in_progress"
            batch.times["in_progress_at"] = now
        if batch.polls < self.behaviour.polls:
            return
        outcome = self.behaviour.outcome
        if outcome == "completed":
            return self._finish(batch, "completed", "completed_at")
        self._finish(batch, outcome, f"{outcome}_at")

    def _finish(self, batch: _Batch, status: str, stamp: str) -> None:
        if self.files[batch.input_file_id].deleted:  # deleted while the batch ran: nothing to answer from
            problem = _problem("input_file_deleted", f"the input file {batch.input_file_id} was deleted", None)
            batch.status, batch.errors = "failed", {"object": "list", "data": [problem]}
            batch.times["failed_at"] = int(time.time())
            return
        lines, _ = _requests(self.files[batch.input_file_id].content, batch.endpoint)
        out: list[dict[str, Any]] = []
        err: list[dict[str, Any]] = []
        for number, line in enumerate(lines):
            if status == "completed" or number < self.behaviour.partial:
                answered = self._answer(line)
                (out if answered["response"] and answered["response"]["status_code"] == 200 else err).append(answered)
            else:
                code = "batch_expired" if status == "expired" else "batch_cancelled"
                message = f"this request could not be executed before the batch was {status}"
                err.append(_line(line["custom_id"], None, {"code": code, "message": message}))
        out += [{**out[0], "custom_id": f"stray-{n}"} for n in range(1, self.behaviour.stray_lines + 1) if out]
        batch.completed, batch.failed = len(out), len(err)
        if out:
            batch.output_file_id = self._file(f"{batch.id}_output.jsonl", "batch_output", _jsonl(out)).id
        if err:
            batch.error_file_id = self._file(f"{batch.id}_error.jsonl", "batch_output", _jsonl(err)).id
        batch.status = status
        batch.times["finalizing_at" if status == "completed" else "cancelling_at"] = int(time.time())
        batch.times[stamp] = int(time.time())

    def _answer(self, line: dict[str, Any]) -> dict[str, Any]:
        body = line["body"]
        refused = self.refuse(body) if self.refuse is not None else None
        if refused is not None:  # as the API answers the same body live (runner.model.strict_openai)
            return _line(line["custom_id"], {"status_code": 400, "body": refused}, None)
        try:
            match = self.script.next(body)
        except NoRuleMatched as exc:
            return _line(line["custom_id"], {"status_code": 400, "body": {"error": {"message": str(exc)}}}, None)
        fault = match.reply.fault
        if fault is not None:
            payload, _ = fault.body_bytes()
            try:
                error_body: Any = json.loads(payload)
            except ValueError:
                error_body = {"error": {"message": payload.decode(errors="replace")}}
            return _line(line["custom_id"], {"status_code": fault.status, "body": error_body}, None)
        completion = match.reply.completion(body, match.serial, match.tokenizer)
        self._bill(completion)
        return _line(line["custom_id"], {"status_code": 200, "body": completion}, None)

    def _file(self, filename: str, purpose: str, content: bytes) -> _File:
        created = _File(f"file-{next(self._ids):06d}", filename, purpose, content, int(time.time()))
        self.files[created.id] = created
        return created


def _requests(content: bytes, endpoint: str) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """The request lines of an input file, and the first problem found (``None``: valid)."""
    lines: list[dict[str, Any]] = []
    seen: set[str] = set()
    for number, text in enumerate(content.decode(errors="replace").splitlines(), start=1):
        if not text.strip():
            continue
        try:
            line = json.loads(text)
        except ValueError:
            return lines, _problem("invalid_json_line", "this line is not valid JSON", number)
        if not isinstance(line, dict) or not isinstance(line.get("body"), dict) or not line.get("custom_id"):
            return lines, _problem("missing_required_parameter", "each line needs custom_id, method, url and body", number)
        if line.get("method") != "POST" or line.get("url") != endpoint:
            return lines, _problem("mismatched_endpoint", f"url must be {endpoint} with method POST", number)
        if line["custom_id"] in seen:
            return lines, _problem("duplicate_custom_id", f"custom_id {line['custom_id']!r} is used twice", number)
        seen.add(line["custom_id"])
        lines.append(line)
    if not lines:
        return lines, _problem("empty_file", "the input file has no requests", None)
    return lines, None


def _problem(code: str, message: str, line: int | None) -> dict[str, Any]:
    return {"code": code, "message": message, "param": None, "line": line}


def _line(custom_id: str, response: dict[str, Any] | None, error: dict[str, Any] | None) -> dict[str, Any]:
    if response is not None:
        response = {"request_id": f"req_{custom_id}", **response}
    return {"id": f"batch_req_{custom_id}", "custom_id": custom_id, "response": response, "error": error}


def _jsonl(lines: list[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(line) + "\n" for line in lines).encode()


def _error(status: int, message: str) -> tuple[int, Any]:
    kind = "not_found" if status == 404 else "invalid_request_error"
    return status, {"error": {"message": message, "type": kind, "param": None, "code": None}}


def _multipart(content_type: str, raw: bytes) -> dict[str, tuple[str | None, bytes]] | None:
    """``{field name: (file name, bytes)}`` of a ``multipart/form-data`` body, or ``None``."""
    if not content_type.startswith("multipart/form-data"):
        return None
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
        f"Content-Type: {content_type}\r\n\r\n".encode() + raw
    )
    if not message.is_multipart():
        return None
    fields: dict[str, tuple[str | None, bytes]] = {}
    for part in message.iter_parts():  # type: ignore[attr-defined]
        name = part.get_param("name", header="content-disposition")
        if name:
            payload = part.get_payload(decode=True)
            fields[str(name)] = (part.get_filename(), payload if isinstance(payload, bytes) else b"")
    return fields
