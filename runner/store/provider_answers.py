"""The answers a provider batch (``runner batch --via batch-api``) collected, in the run store;
and those of batch rows run live, kept as they arrive (:mod:`runner.agent.replay`).

One row per model call a run sent to a provider batch, keyed by the run's id and the
request's fingerprint (:mod:`runner.model.fingerprint`): written when the call is handed to
a batch (with the run store id of the call's reservation, so an answer that comes back after
the caller is gone can still settle it), then completed with the answer's body when its line
is collected. A resumed run whose request matches a stored answer is served from here
(:class:`runner.agent.replay.ReplayCache`) instead of being sent again. A failed line whose
caller had gone is kept too, until the resumed call takes it (it fails as the caller would
have: once). Bodies are redacted before they are written, like everything else in the store.

When this record of a batch's calls is lost while its journal is not (a retry on a worker
without the disk that held the run store, the journal elsewhere), the batch's answers are
collected all the same, but no reservation of theirs is left to settle, and a Message Batch's
``custom_id`` is a hash (:func:`hashed_call_id`) that names no call by itself. Such answers are
kept *unclaimed*: under the hash of their call alone (run id :data:`UNCLAIMED`). A resumed call
whose hash is one of them is served it (:meth:`ProviderAnswers.answer`); being recorded nowhere
yet (:attr:`Kept.recorded`), the call is reserved and recorded then, at the batch price, and
only after that claims the answer (:meth:`ProviderAnswers.claim`: keyed by its run from then on,
so it is served as recorded and pruned with the run): the spend is never lost, and counted
twice only if a crash falls between the record and the claim. Never-claimed ones are pruned by age.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from runner.store.database import Database
from runner.store.runstore import now_iso
from runner.store.schema import Schema

SCHEMA = Schema("""
CREATE TABLE IF NOT EXISTS provider_answers (
  run_id TEXT NOT NULL,
  fingerprint TEXT NOT NULL,
  ledger_id {bigint},
  batch_part TEXT,
  body_json TEXT,
  error_kind TEXT,
  error_message TEXT,
  sent_at TEXT NOT NULL,
  answered_at TEXT,
  PRIMARY KEY (run_id, fingerprint)
)
""")
"""The table, for both backends (:mod:`runner.store.schema`)."""

UNCLAIMED = ""
"""The run id of an answer kept by its call's :func:`hashed_call_id` alone."""


def hashed_call_id(run_id: str, fingerprint: str) -> str:
    """A call's id as 1-64 of ``[a-zA-Z0-9_-]`` (a Message Batch's ``custom_id``: a row id may hold
    dots and be long, the fingerprint alone is 64 hex digits): a hash of both, the same in any process."""
    return "c" + hashlib.sha256(f"{run_id}\0{fingerprint}".encode()).hexdigest()[:40]


@dataclass(frozen=True)
class Kept:
    """A stored answer, and whether its spend is recorded in this store already (an unclaimed
    one's is not: its caller records the call when it is served)."""

    body: dict[str, Any]
    recorded: bool = True


class ProviderAnswers:
    """Calls sent through provider batches, and their answers, by run id and fingerprint.

    Every write sets values (an upsert, an ``UPDATE ... SET``, a ``DELETE``): applying it twice
    leaves what applying it once does, so each is repeated on a new connection when the store's
    drops (a row whose call was answered must not fail, and pay for its call again, over it)."""

    def __init__(self, db: Database, *, create: bool = True):
        """``create=False``: the table is known to exist (the batch's rounds created it)."""
        self._db = db
        if create:
            db.create(SCHEMA)

    def sent(self, run_id: str, fingerprint: str, ledger_id: int | None) -> None:
        """Note a call handed to a provider batch, with its reservation's id (the latest wins)."""
        self._db.execute(
            "INSERT INTO provider_answers (run_id, fingerprint, ledger_id, sent_at) VALUES (?, ?, ?, ?)"
            " ON CONFLICT (run_id, fingerprint) DO UPDATE SET ledger_id = excluded.ledger_id, sent_at = excluded.sent_at",
            (run_id, fingerprint, ledger_id, now_iso()), idempotent=True,
        )

    def in_part(self, keys: list[tuple[str, str]], part: str) -> None:
        """Note that these calls (run id, fingerprint) are about to go out in the provider batch ``part``."""
        self._db.executemany(
            "UPDATE provider_answers SET batch_part = ? WHERE run_id = ? AND fingerprint = ?", [(part, *key) for key in keys],
            idempotent=True,
        )

    def calls_in(self, part: str) -> list[tuple[str, str]]:
        """``(run id, fingerprint)`` of every call noted in the provider batch ``part``: what its
        lines may answer (a line for any other call is one the batch should not hold)."""
        rows = self._db.rows("SELECT run_id, fingerprint FROM provider_answers WHERE batch_part = ?", (part,))
        return [(str(row["run_id"]), str(row["fingerprint"])) for row in rows]

    def unanswered_in(self, part: str) -> list[tuple[str, int]]:
        """``(run id, reservation id)`` of the calls of ``part`` that have no answer."""
        rows = self._db.rows(
            "SELECT run_id, ledger_id FROM provider_answers WHERE batch_part = ? AND body_json IS NULL AND ledger_id IS NOT NULL",
            (part,),
        )
        return [(str(row["run_id"]), int(row["ledger_id"])) for row in rows]

    def never_sent(self, run_prefix: str, parts_out: set[str]) -> list[tuple[str, int]]:
        """``(run id, reservation id)`` of the provider batch calls (tariff ``batch``) of runs whose
        id starts with ``run_prefix`` still in flight in the run store (``reserved``, or
        ``unsettled`` by a resumed attempt) that are in none of ``parts_out`` (the batches that
        may still answer: created and not collected, or maybe created): calls an earlier process
        reserved but still held when it died (on their way to its queue, in it, or noted for a
        batch it never recorded an intent for). No provider has seen them. Ask only while no
        process runs the batch's rows (a live one's calls are on that way too)."""
        rows = self._db.rows(
            "SELECT m.run_id, m.id, p.batch_part FROM model_calls m LEFT JOIN provider_answers p"
            " ON p.run_id = m.run_id AND p.ledger_id = m.id WHERE substr(m.run_id, 1, ?) = ? AND m.tariff = 'batch'"
            " AND m.status IN ('reserved', 'unsettled')",
            (len(run_prefix), run_prefix),
        )
        return [(str(row["run_id"]), int(row["id"])) for row in rows if row["batch_part"] not in parts_out]

    def answered(self, run_id: str, fingerprint: str, body: dict[str, Any]) -> None:
        """Keep the body of the completion that answered the call (already redacted)."""
        now = now_iso()
        self._db.execute(
            "INSERT INTO provider_answers (run_id, fingerprint, body_json, sent_at, answered_at) VALUES (?, ?, ?, ?, ?)"
            " ON CONFLICT (run_id, fingerprint) DO UPDATE SET body_json = excluded.body_json, answered_at = excluded.answered_at",
            (run_id, fingerprint, json.dumps(body, ensure_ascii=False), now, now), idempotent=True,
        )

    def failed(self, run_id: str, fingerprint: str, kind: str, message: str) -> None:
        """Keep why the call was not answered, for its caller's next attempt to take."""
        self._set_error(run_id, fingerprint, kind, message)

    def take_error(self, run_id: str, fingerprint: str) -> tuple[str, str] | None:
        """The failure kept for this call, forgotten as it is taken (``None``: none kept)."""
        row = self._db.row(
            "SELECT error_kind, error_message FROM provider_answers WHERE run_id = ? AND fingerprint = ? AND error_kind IS NOT NULL",
            (run_id, fingerprint),
        )
        if row is None:
            return None
        self._set_error(run_id, fingerprint, None, None)
        return str(row["error_kind"]), str(row["error_message"] or "")

    def _set_error(self, run_id: str, fingerprint: str, kind: str | None, message: str | None) -> None:
        self._db.execute(
            "UPDATE provider_answers SET error_kind = ?, error_message = ? WHERE run_id = ? AND fingerprint = ?",
            (kind, message, run_id, fingerprint), idempotent=True,
        )

    def answered_unclaimed(self, call_id: str, body: dict[str, Any]) -> None:
        """Keep the body of a completion known only by its call's :func:`hashed_call_id` (see the module doc)."""
        self.answered(UNCLAIMED, call_id, body)

    def answer(self, run_id: str, fingerprint: str) -> Kept | None:
        """The completion stored for this call, if it was answered (an unclaimed answer to it comes
        back not :attr:`~Kept.recorded`: its caller records the call, then claims it: :meth:`claim`)."""
        row = self._db.row(
            "SELECT run_id, body_json FROM provider_answers WHERE body_json IS NOT NULL"
            " AND ((run_id = ? AND fingerprint = ?) OR (run_id = ? AND fingerprint = ?)) ORDER BY run_id DESC LIMIT 1",
            (run_id, fingerprint, UNCLAIMED, hashed_call_id(run_id, fingerprint)),
        )
        body = json.loads(row["body_json"]) if row is not None else None
        if row is None or not isinstance(body, dict):
            return None
        return Kept(body, recorded=row["run_id"] != UNCLAIMED)

    def claim(self, run_id: str, fingerprint: str) -> None:
        """Make the unclaimed answer to this call the run's own (once its call is recorded: in the
        same commit where a batch groups them; a crash between the two records it again, never
        less), so it is served as recorded from then on and pruned with the run."""
        self._db.atomic(lambda db: self._claim(db, run_id, fingerprint))

    @staticmethod
    def _claim(db: Database, run_id: str, fingerprint: str) -> None:
        hashed = hashed_call_id(run_id, fingerprint)
        row = db.row("SELECT body_json FROM provider_answers WHERE run_id = ? AND fingerprint = ?", (UNCLAIMED, hashed))
        if row is None or row["body_json"] is None:
            return  # claimed already (a unit run again after a dropped connection)
        ProviderAnswers(db, create=False).answered(run_id, fingerprint, json.loads(row["body_json"]))
        db.execute("DELETE FROM provider_answers WHERE run_id = ? AND fingerprint = ?", (UNCLAIMED, hashed))

    def forget(self, run_id: str) -> None:
        """Drop the answers kept for a live run (an attempt that starts over keeps its own)."""
        self._db.execute("DELETE FROM provider_answers WHERE run_id = ?", (run_id,), idempotent=True)

    def ledger_id(self, run_id: str, fingerprint: str) -> int | None:
        """The run store id of the reservation made for this call when it was sent."""
        row = self._db.row("SELECT ledger_id FROM provider_answers WHERE run_id = ? AND fingerprint = ?", (run_id, fingerprint))
        return int(row["ledger_id"]) if row is not None and row["ledger_id"] is not None else None
