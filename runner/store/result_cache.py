"""The result cache's table: values kept by the hash of what produced them, each until its
expiry, in the run store's database (SQLite or PostgreSQL, through :class:`Database`).

A key is a hash of a canonical request (see :mod:`runner.agent.call_cache`); a value is the
JSON of what answered it, redacted before it is written like everything else in the store.
"""

from __future__ import annotations

import json
import time
from typing import Any

from runner.store.database import Database
from runner.store.schema import Schema

SCHEMA = Schema("""
CREATE TABLE IF NOT EXISTS result_cache (
  key TEXT PRIMARY KEY,
  kind TEXT NOT NULL,
  value_json TEXT NOT NULL,
  created_at {real} NOT NULL,
  expires_at {real} NOT NULL
)
""")
"""The result cache's table, for both backends (:mod:`runner.store.schema`)."""


class ResultStore:
    """Cached results by key; an expired entry, or one that is not JSON, is never served
    (and is replaced on the next put)."""

    def __init__(self, db: Database):
        self._db = db
        db.create(SCHEMA)

    def get(self, key: str, *, now: float | None = None) -> Any | None:
        """The value stored under ``key``, unless it has expired (``now``: seconds since the epoch)."""
        row = self._db.row("SELECT value_json, expires_at FROM result_cache WHERE key = ?", (key,))
        if row is None or float(row["expires_at"]) <= (time.time() if now is None else now):
            return None
        try:
            return json.loads(row["value_json"])
        except (TypeError, ValueError):  # not JSON (a hand edit): a miss, replaced on the next put
            return None

    def put(self, key: str, kind: str, value: Any, ttl_seconds: float, *, now: float | None = None) -> None:
        """Store ``value`` under ``key`` for ``ttl_seconds`` (replacing what was there)."""
        at = time.time() if now is None else now
        self._db.execute(
            "INSERT INTO result_cache (key, kind, value_json, created_at, expires_at) VALUES (?, ?, ?, ?, ?)"
            " ON CONFLICT (key) DO UPDATE SET kind = excluded.kind, value_json = excluded.value_json,"
            " created_at = excluded.created_at, expires_at = excluded.expires_at",
            (key, kind, json.dumps(value, ensure_ascii=False, sort_keys=True), at, at + ttl_seconds),
            idempotent=True,
        )

    def purge_expired(self, *, now: float | None = None) -> int:
        """Delete expired entries; returns how many."""
        return self._db.execute(
            "DELETE FROM result_cache WHERE expires_at <= ?", (time.time() if now is None else now,), idempotent=True
        )
