"""Full transcripts: every model call's request messages, tool schemas and response, and every
tool call's whole output, in the run store's database (SQLite or PostgreSQL).

Content-addressed: each message, each tools list and each tool output is a blob named by the
SHA-256 of its JSON, stored once however many calls and runs send it (a shared system prompt,
an agent's tools list, the growing history of one conversation). An entry per call lists the
digests it used; ``transcript_refs`` says which runs use which blob, so pruning old runs can
delete the blobs no remaining run refers to (:mod:`runner.store.retention`).

A run attempt writes through its :class:`RunTranscript`, which redacts each value with the
run's secrets as it serialises it (:func:`~runner.redact.redacted_json`: one serialisation,
walked again only when a secret's form may be in it), and writes each blob and its reference
once per attempt however many of its calls send it again.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from runner.core.calls import Exchange, ModelCallEntry, ToolCallEntry
from runner.redact import redacted_json
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
_ROWS_PER_INSERT = 200  # four values a blob: within the 999 parameters an older SQLite allows


def digest_of(value: Any) -> str:
    """The content address of a JSON-able value (its canonical JSON's SHA-256)."""
    return _addressed(_canonical(value))[0]


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

    def __init__(self, db: Database, *, now: Any, create: bool = True) -> None:
        """``create=False``: the tables are known to exist (a store opened read-only)."""
        self._db, self._now = db, now
        if create:
            db.create(SCHEMA)

    def for_run(self, run_id: str, attempt: int, secrets: Sequence[str]) -> RunTranscript:
        """Where one run attempt writes its transcript, redacted with ``secrets``."""
        return RunTranscript(self._db, self._now, run_id, attempt, tuple(secrets))

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


class RunTranscript:
    """One run attempt's transcript writes: each value redacted with the run's secrets as it is
    serialised; each blob (and this run's reference to it) written once per attempt."""

    def __init__(self, db: Database, now: Any, run_id: str, attempt: int, secrets: tuple[str, ...]) -> None:
        self._db, self._now = db, now
        self.run_id, self.attempt, self.secrets = run_id, attempt, secrets
        self._stored: set[str] = set()  # digests whose blob and reference this attempt has written

    def add_model_call(self, call_id: int | None, call: ModelCallEntry, exchange: Exchange) -> SentRequest:
        """Store one model call attempt's request and response (``exchange``).

        Written first when the call is reserved (its request, status ``reserved``, no response),
        then again when it is settled (:meth:`settle_model_call`, or here again: the entry of the
        same ``call_id`` is replaced), so a call a crash cut still shows what was sent."""
        messages = [self._addressed(m) for m in exchange.messages]
        tools = self._addressed(list(exchange.tools)) if exchange.tools else None
        request = SentRequest(tuple(d for d, _ in messages), tools[0] if tools else None)
        blobs = messages + ([tools] if tools else [])
        entry = _model_entry(call, exchange, request)
        self._write(call.step_id, call.agent, "model", call.seq, call_id, entry, blobs, fresh=call.status == "reserved")
        return request

    def settle_model_call(self, call_id: int, call: ModelCallEntry, exchange: Exchange, request: SentRequest) -> None:
        """Replace the entry of a call reserved with ``request`` by how it ended: one statement (the
        request's blobs are stored already; only ``exchange``'s settings and response are read)."""
        entry = _model_entry(call, exchange, request)
        updated = self._db.execute(
            "UPDATE transcript_entries SET entry_json = ? WHERE run_id = ? AND call_id = ? AND kind = 'model'",
            (self._json(entry), self.run_id, call_id), idempotent=True,
        )  # fmt: skip
        if not updated:  # the reserved entry is gone (a prune in between): write it again
            self._write(call.step_id, call.agent, "model", call.seq, call_id, entry, [], fresh=True)

    def add_tool_call(self, call: ToolCallEntry, output: str) -> None:
        """Store one tool call with its whole output (``output``, already redacted: a secret must
        not be cut in two), cut at :data:`TOOL_OUTPUT_LIMIT`."""
        kept, cut = clip_output(output)
        digest, body = self._addressed(kept)
        entry = {
            "name": call.name, "arguments": call.arguments, "status": call.status,
            "duration_seconds": call.duration_seconds, "output": digest, "output_chars": len(output),
            "truncated": cut, "artifacts": list(call.artifacts),
        }  # fmt: skip
        self._write(call.step_id, call.agent, "tool", call.seq, None, entry, [(digest, body)], fresh=True)

    def _addressed(self, value: Any) -> tuple[str, str]:
        return _addressed(redacted_json(value, self.secrets, _canonical))

    def _json(self, entry: dict[str, Any]) -> str:
        return redacted_json(entry, self.secrets, _entry_json)

    def _write(
        self, step_id: str, agent: str, kind: str, seq: int, call_id: int | None,
        entry: dict[str, Any], blobs: Sequence[tuple[str, str]], *, fresh: bool,
    ) -> None:
        """Write an entry and the blobs (digest, canonical JSON) this attempt has not written yet;
        ``fresh``: no entry of ``call_id`` exists yet."""
        run_id, unique = self.run_id, {d: body for d, body in blobs if d not in self._stored}
        now, text = self._now(), self._json(entry)
        token = uuid.uuid4().hex

        def write(db: Database) -> bool:  # the reference first: a prune waits for it (runner.store.retention) and keeps the blob
            if unique:
                _insert(db, "transcript_refs (run_id, digest)", [(run_id, d) for d in unique], "(run_id, digest)")
                _insert(db, "transcript_blobs (digest, body, chars, created_at)", [(d, b, len(b), now) for d, b in unique.items()], "(digest)")
            if call_id is not None and not fresh and db.execute(  # the entry written when the call was reserved
                "UPDATE transcript_entries SET entry_json = ?, token = ? WHERE run_id = ? AND call_id = ? AND kind = ?",
                (text, token, run_id, call_id, kind),
            ):
                return True
            db.execute(
                "INSERT INTO transcript_entries (run_id, attempt, step_id, agent, kind, seq, call_id, entry_json,"
                " created_at, token) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (run_id, self.attempt, step_id, agent, kind, seq, call_id, text, now, token),
            )
            return True

        def written(db: Database) -> bool | None:
            found = db.row("SELECT 1 AS found FROM transcript_entries WHERE run_id = ? AND token = ?", (run_id, token))
            return True if found else None

        self._db.atomic(write, check=written)
        self._stored.update(unique)  # only once written: a unit that failed stored none of them


def _insert(db: Database, into: str, rows: list[tuple[Any, ...]], key: str) -> None:
    """``rows`` into ``into`` (a table and its columns), those whose ``key`` is there already
    left as they are: one statement per :data:`_ROWS_PER_INSERT` rows."""
    for start in range(0, len(rows), _ROWS_PER_INSERT):
        chunk = rows[start : start + _ROWS_PER_INSERT]
        values = ", ".join(f"({', '.join('?' for _ in chunk[0])})" for _ in chunk)
        db.execute(f"INSERT INTO {into} VALUES {values} ON CONFLICT {key} DO NOTHING", [v for row in chunk for v in row])


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)


def _entry_json(entry: dict[str, Any]) -> str:
    return json.dumps(entry, ensure_ascii=False)


def _addressed(body: str) -> tuple[str, str]:
    """The digest of a canonical JSON ``body``, and the body (the body stored is what was hashed)."""
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
