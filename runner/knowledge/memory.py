"""Long-term memory: notes an agent keeps across runs, in the same kind of index as documents.

Each note is a chunk in the memory index (``.runner/memory.sqlite3``) whose ``collection``
is its scope: ``task:NAME``, ``agent:NAME`` or ``project``. Recall is BM25 over the scope's
notes (the newest first when nothing matches the query's words). Retention limits are
applied on every write and read: at most ``max_entries`` notes per scope (the oldest go
first) and none older than ``max_age_days``.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from runner.core.sources import Source
from runner.knowledge.store import ChunkStore, NewChunk, StoredChunk

MAX_NOTE_CHARS = 4000


@dataclass(frozen=True)
class MemoryScope:
    """Where an agent's notes live and how long they are kept."""

    key: str  # task:NAME | agent:NAME | project
    max_entries: int = 200
    max_age_days: float | None = None


class MemoryStore:
    """The memory index; one per run, shared by its agents (each writes to its own scope)."""

    def __init__(self, path: Path):
        self.store = ChunkStore(path, role="agent memory")  # not derived: a damaged file is moved away, never rebuilt
        self._lock = threading.Lock()  # one connection, used from worker threads

    def close(self) -> None:
        self.store.close()

    async def remember(self, scope: MemoryScope, text: str, now: float | None = None) -> StoredChunk:
        """Store one note in ``scope``, then apply the scope's retention limits."""
        return await asyncio.to_thread(self._remember, scope, text[:MAX_NOTE_CHARS], now or time.time())

    async def recall(self, scope: MemoryScope, query: str, k: int = 5, now: float | None = None) -> list[StoredChunk]:
        """The notes of ``scope`` that best match ``query`` (the newest when none match)."""
        return await asyncio.to_thread(self._recall, scope, query, k, now or time.time())

    @staticmethod
    def source_of(note: StoredChunk) -> Source:
        stamp = time.strftime("%Y-%m-%d %H:%M", time.gmtime(note.created_at))
        return Source("memory", f"memory:{note.collection}", note.text[:80], "", f"noted {stamp} UTC", note.collection)

    def _remember(self, scope: MemoryScope, text: str, now: float) -> StoredChunk:
        with self._lock, self.store.transaction():
            (note_id,) = self.store.add_chunks([NewChunk("", 0, "", "", text, scope.key, now)])
            self._prune(scope, now)
            (note,) = self.store.chunks([note_id])
        return note

    def _recall(self, scope: MemoryScope, query: str, k: int, now: float) -> list[StoredChunk]:
        with self._lock:
            with self.store.transaction():
                self._prune(scope, now)
            ids = self.store.bm25(query, k, collection=scope.key) or self.store.collection_ids(scope.key)[:k]
            return self.store.chunks(ids)

    def _prune(self, scope: MemoryScope, now: float) -> None:
        newest_first = self.store.collection_ids(scope.key)
        expired = newest_first[scope.max_entries :]
        if scope.max_age_days is not None:
            cutoff = now - scope.max_age_days * 86400
            kept = self.store.chunks(newest_first[: scope.max_entries])
            expired += [note.id for note in kept if note.created_at < cutoff]
        self.store.delete_chunks(expired)


@dataclass(frozen=True)
class Notebook:
    """One agent's view of the memory: the store and the scope it reads and writes."""

    store: MemoryStore
    scope: MemoryScope

    async def remember(self, text: str) -> StoredChunk:
        return await self.store.remember(self.scope, text)

    async def recall(self, query: str, k: int = 5) -> list[StoredChunk]:
        return await self.store.recall(self.scope, query, k)
