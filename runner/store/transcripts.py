"""Full transcripts: every model call's request messages, tool schemas and response, and every
tool call's whole output, in the run store's database (SQLite or PostgreSQL).

Content-addressed: each message, each tools list and each tool output is a blob named by the
SHA-256 of its JSON, stored once however many calls and runs send it (a shared system prompt,
an agent's tools list, the growing history of one conversation). An entry per call lists the
digests it used; ``transcript_refs`` says which runs use which blob, so pruning old runs can
delete the blobs no remaining run refers to (:mod:`runner.store.retention`).

What arrives here was redacted by the :class:`~runner.store.recorder.RunRecorder` first.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from runner.core.calls import Exchange, ModelCallEntry, ToolCallEntry
from runner.store.database import Database
from runner.store.schema import AddedColumn, Schema

TOOL_OUTPUT_LIMIT = 256_000
"""Characters of one tool output the transcript keeps; the rest is cut with a note saying how much."""

SCHEMA = Schema(
    """
CREATE TABLE IF NOT EXISTS transcript_blobs (
  digest TEXT PRIMARY KEY,
  body TEXT NOT NULL,
  chars {bigint} NOT NULL,
  created_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS transcript_entries (
  id {id},
  run_id TEXT NOT NULL,
  attempt {int} NOT NULL,
  step_id TEXT NOT NULL,
  agent TEXT NOT NULL,
  kind TEXT NOT NULL,
  seq {int} NOT NULL,
  call_id {bigint},
  entry_json TEXT NOT NULL,
  created_at TEXT NOT NULL,
  token TEXT
);
CREATE INDEX IF NOT EXISTS transcript_entries_by_run ON transcript_entries (run_id, id);
CREATE TABLE IF NOT EXISTS transcript_refs (
  run_id TEXT NOT NULL,
  digest TEXT NOT NULL,
  PRIMARY KEY (run_id, digest)
);
CREATE INDEX IF NOT EXISTS transcript_refs_by_digest ON transcript_refs (digest)
""",
    added=(AddedColumn("transcript_entries", "token", "TEXT"),),  # a write repeated after a lost connection finds its first try
)
"""The transcript tables, for both backends (:mod:`runner.store.schema`)."""
_CHUNK = 500  # digests per IN (...) query


def digest_of(value: Any) -> str:
    """The content address of a JSON-able value (its canonical JSON's SHA-256)."""
    return _addressed(value)[0]


@dataclass(frozen=True)
class SentRequest:
    """What a reserved call's transcript entry names of its request (its blobs are written):
    settling the call rewrites the entry only."""

    messages: tuple[str, ...]
    tools: str | None


def clip_output(text: str, limit: int = TOOL_OUTPUT_LIMIT) -> tuple[str, bool]:
    """``text`` cut to ``limit`` characters with a note saying what was left out; whether it was cut."""
    if len(text) <= limit:
        return text, False
    return f"{text[:limit]}\n[transcript: output cut at {limit} of {len(text)} characters]", True


class TranscriptStore:
    """The transcript tables of one run store database. Thread-safe (the database is)."""

    def __init__(self, db: Database, *, now: Any) -> None:
        self._db, self._now = db, now
        db.create(SCHEMA)

    def add_model_call(
        self, run_id: str, attempt: int, call_id: int | None, call: ModelCallEntry, exchange: Exchange
    ) -> SentRequest:
        """Store one model call attempt's request and response (``exchange``, already redacted).

        Written first when the call is reserved (its request, status ``reserved``, no response),
        then again when it is settled (:meth:`settle_model_call`, or here again: the entry of the
        same ``call_id`` is replaced), so a call a crash cut still shows what was sent."""
        messages = [_addressed(m) for m in exchange.messages]
        tools = _addressed(list(exchange.tools)) if exchange.tools else None
        request = SentRequest(tuple(d for d, _ in messages), tools[0] if tools else None)
        blobs = messages + ([tools] if tools else [])
        entry = _model_entry(call, exchange, request)
        self._write(run_id, attempt, call.step_id, call.agent, "model", call.seq, call_id, entry, blobs, fresh=call.status == "reserved")
        return request

    def settle_model_call(
        self, run_id: str, attempt: int, call_id: int, call: ModelCallEntry, exchange: Exchange, request: SentRequest
    ) -> None:
        """Replace the entry of a call reserved with ``request`` by how it ended: one statement (the
        request's blobs are stored already; only ``exchange``'s settings and response are read)."""
        entry = _model_entry(call, exchange, request)
        updated = self._db.execute(
            "UPDATE transcript_entries SET entry_json = ? WHERE run_id = ? AND call_id = ? AND kind = 'model'",
            (json.dumps(entry, ensure_ascii=False), run_id, call_id), idempotent=True,
        )  # fmt: skip
        if not updated:  # the reserved entry is gone (a prune in between): write it again
            self._write(run_id, attempt, call.step_id, call.agent, "model", call.seq, call_id, entry, [], fresh=True)

    def add_tool_call(self, run_id: str, attempt: int, call: ToolCallEntry, output: str) -> None:
        """Store one tool call with its whole output (``output``, already redacted), cut at :data:`TOOL_OUTPUT_LIMIT`."""
        kept, cut = clip_output(output)
        digest, body = _addressed(kept)
        entry = {
            "name": call.name, "arguments": call.arguments, "status": call.status,
            "duration_seconds": call.duration_seconds, "output": digest, "output_chars": len(output),
            "truncated": cut, "artifacts": list(call.artifacts),
        }  # fmt: skip
        self._write(run_id, attempt, call.step_id, call.agent, "tool", call.seq, None, entry, [(digest, body)], fresh=True)

    def _write(
        self, run_id: str, attempt: int, step_id: str, agent: str, kind: str, seq: int, call_id: int | None,
        entry: dict[str, Any], blobs: Sequence[tuple[str, str]], *, fresh: bool,
    ) -> None:
        """Write an entry and its blobs (digest, canonical JSON); ``fresh``: no entry of ``call_id`` exists yet."""
        unique = dict(blobs)
        now = self._now()
        token = uuid.uuid4().hex

        def write(db: Database) -> bool:  # the reference first: a prune in between keeps the blob
            db.executemany(
                "INSERT INTO transcript_refs (run_id, digest) VALUES (?, ?) ON CONFLICT (run_id, digest) DO NOTHING",
                [(run_id, d) for d in unique],
            )
            db.executemany(
                "INSERT INTO transcript_blobs (digest, body, chars, created_at) VALUES (?, ?, ?, ?)"
                " ON CONFLICT (digest) DO NOTHING",
                [(d, body, len(body), now) for d, body in unique.items()],
            )
            text = json.dumps(entry, ensure_ascii=False)
            if call_id is not None and not fresh and db.execute(  # the entry written when the call was reserved
                "UPDATE transcript_entries SET entry_json = ?, token = ? WHERE run_id = ? AND call_id = ? AND kind = ?",
                (text, token, run_id, call_id, kind),
            ):
                return True
            db.execute(
                "INSERT INTO transcript_entries (run_id, attempt, step_id, agent, kind, seq, call_id, entry_json,"
                " created_at, token) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (run_id, attempt, step_id, agent, kind, seq, call_id, text, now, token),
            )
            return True

        def written(db: Database) -> bool | None:
            found = db.row("SELECT 1 AS found FROM transcript_entries WHERE run_id = ? AND token = ?", (run_id, token))
            return True if found else None

        self._db.atomic(write, check=written)

    # -- reading ---------------------------------------------------------------------------

    def read(self, run_id: str) -> list[dict[str, Any]]:
        """A run's transcript in the order it happened, every digest resolved to its content.

        Model entries carry ``messages`` (the request's messages), ``message_digests`` (to see
        which messages an earlier call already sent), ``tools`` and ``response``; tool entries
        carry ``output``. A blob that is gone shows as ``None``."""
        rows = self._db.rows("SELECT * FROM transcript_entries WHERE run_id = ? ORDER BY id", (run_id,))
        entries = [_entry(row) for row in rows]
        wanted = {d for e in entries for d in _digests(e)}
        blobs = self._blobs(wanted)
        return [_resolved(entry, blobs) for entry in entries]

    def _blobs(self, digests: Iterable[str]) -> dict[str, Any]:
        listed, found = sorted(digests), {}
        for start in range(0, len(listed), _CHUNK):
            chunk = listed[start : start + _CHUNK]
            marks = ", ".join("?" for _ in chunk)
            for row in self._db.rows(f"SELECT digest, body FROM transcript_blobs WHERE digest IN ({marks})", chunk):
                found[row["digest"]] = json.loads(row["body"])
        return found

    def blob_count(self) -> int:
        """How many distinct blobs are stored (every run together)."""
        row = self._db.row("SELECT COUNT(*) AS n FROM transcript_blobs")
        return int(row["n"]) if row else 0


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)


def _addressed(value: Any) -> tuple[str, str]:
    """``value``'s digest and canonical JSON (serialised once: the body stored is what was hashed)."""
    body = _canonical(value)
    return "sha256:" + hashlib.sha256(body.encode("utf-8", "surrogatepass")).hexdigest(), body


def _model_entry(call: ModelCallEntry, exchange: Exchange, request: SentRequest) -> dict[str, Any]:
    return {
        "model": call.model, "status": call.status, "settings": exchange.settings,
        "messages": list(request.messages), "tools": request.tools,
        "response": exchange.response, "error": call.error, "error_kind": call.error_kind,
        "usage": {
            "input_tokens": call.usage.input_tokens, "output_tokens": call.usage.output_tokens,
            "cached_input_tokens": call.usage.cached_input_tokens, "cost_usd": call.usage.cost_usd,
        },
        "latency_seconds": call.latency_seconds,
    }  # fmt: skip


def _entry(row: dict[str, Any]) -> dict[str, Any]:
    head = {k: row[k] for k in ("run_id", "attempt", "step_id", "agent", "kind", "seq", "call_id", "created_at")}
    return head | json.loads(row["entry_json"])


def _digests(entry: dict[str, Any]) -> list[str]:
    if entry["kind"] == "tool":
        return [entry["output"]]
    return [*entry["messages"], *([entry["tools"]] if entry.get("tools") else [])]


def _resolved(entry: dict[str, Any], blobs: dict[str, Any]) -> dict[str, Any]:
    if entry["kind"] == "tool":
        return entry | {"output": blobs.get(entry["output"])}
    tools = blobs.get(entry["tools"]) if entry.get("tools") else []
    messages = [blobs.get(d) for d in entry["messages"]]
    return entry | {"messages": messages, "message_digests": entry["messages"], "tools": tools}
