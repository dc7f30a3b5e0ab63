"""The SQLite index: chunks, their FTS5 full-text index (BM25) and optionally their vectors.

One file per knowledge base (and one for memories). ``chunks`` holds the text with its
citation (file, heading, position) and a ``collection`` (the memory scope; empty for
documents); ``chunks_fts`` is an external-content FTS5 table kept in step by triggers;
``chunks_vec`` is a sqlite-vec ``vec0`` table (cosine distance) created once the
embedding size is known. Vectors need an SQLite that can load extensions: the stdlib's
when it can, else ``pysqlite3`` (both from the ``knowledge`` extra).
"""

from __future__ import annotations

import importlib
import re
import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner.core.sqlite_faults import file_faults, wal_mode
from runner.errors import ConfigError

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS files (path TEXT PRIMARY KEY, sha256 TEXT NOT NULL, size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS chunks (
    id INTEGER PRIMARY KEY,
    path TEXT NOT NULL,
    seq INTEGER NOT NULL,
    heading TEXT NOT NULL DEFAULT '',
    position TEXT NOT NULL DEFAULT '',
    text TEXT NOT NULL,
    collection TEXT NOT NULL DEFAULT '',
    created_at REAL NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS chunks_by_path ON chunks(path);
CREATE INDEX IF NOT EXISTS chunks_by_collection ON chunks(collection, created_at);
CREATE VIRTUAL TABLE IF NOT EXISTS chunks_fts USING fts5(
    heading, text, content='chunks', content_rowid='id', tokenize='porter unicode61 remove_diacritics 2'
);
CREATE TRIGGER IF NOT EXISTS chunks_ai AFTER INSERT ON chunks BEGIN
    INSERT INTO chunks_fts(rowid, heading, text) VALUES (new.id, new.heading, new.text);
END;
CREATE TRIGGER IF NOT EXISTS chunks_ad AFTER DELETE ON chunks BEGIN
    INSERT INTO chunks_fts(chunks_fts, rowid, heading, text) VALUES ('delete', old.id, old.heading, old.text);
END;
"""
TOKEN = re.compile(r"\w+", re.UNICODE)
VECTORS_HINT = "embeddings need sqlite-vec and an SQLite that loads extensions: pip install 'runner[knowledge]'"


@dataclass(frozen=True)
class NewChunk:
    """A chunk to store."""

    path: str
    seq: int
    heading: str
    position: str
    text: str
    collection: str = ""
    created_at: float = 0.0


@dataclass(frozen=True)
class StoredChunk(NewChunk):
    """A chunk as stored, with its id."""

    id: int = field(kw_only=True)


def connect(path: Path, *, vectors: bool, role: str = "knowledge index") -> Any:
    """An SQLite connection to ``path`` with the schema; with sqlite-vec loaded if ``vectors``.
    A damaged, locked or read-only file is one error naming it and the fix (:mod:`runner.core.sqlite_faults`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    module: Any = sqlite3
    if vectors and not hasattr(sqlite3.Connection, "enable_load_extension"):
        try:
            module = importlib.import_module("pysqlite3.dbapi2")
        except ImportError:
            raise ConfigError(VECTORS_HINT) from None
    with file_faults(path, role, 60):
        connection = module.connect(str(path), timeout=60, isolation_level=None, check_same_thread=False)
        wal_mode(connection, 60)
        connection.execute("PRAGMA busy_timeout=60000")
        if vectors:
            _load_vec(connection)
        connection.executescript(SCHEMA)
    return connection


def _load_vec(connection: Any) -> None:
    try:
        sqlite_vec = importlib.import_module("sqlite_vec")
        connection.enable_load_extension(True)
        sqlite_vec.load(connection)
        connection.enable_load_extension(False)
    except (ImportError, AttributeError, sqlite3.Error) as exc:
        raise ConfigError(f"{VECTORS_HINT} ({exc})") from None


def fts_query(text: str) -> str:
    """A free-text question as an FTS5 query: any of its words (each quoted, so no operator
    or column syntax in user text reaches FTS5)."""
    words = list(dict.fromkeys(w.lower() for w in TOKEN.findall(text)))[:64]
    return " OR ".join(f'"{w}"' for w in words)


class ChunkStore:
    """Chunks with full-text and (optionally) vector search, in one SQLite file."""

    def __init__(self, path: Path, *, vectors: bool = False, role: str = "knowledge index"):
        self.path = path
        self.vectors = vectors
        self.db = connect(path, vectors=vectors, role=role)

    def close(self) -> None:
        self.db.close()

    # --- meta and files ---------------------------------------------------------------
    def meta(self, key: str) -> str | None:
        row = self.db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def set_meta(self, key: str, value: str) -> None:
        self.db.execute("INSERT INTO meta(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value", (key, value))

    def files(self) -> dict[str, tuple[str, int, int]]:
        """Indexed file -> (sha256, size, mtime_ns)."""
        return {r[0]: (r[1], r[2], r[3]) for r in self.db.execute("SELECT path, sha256, size, mtime_ns FROM files")}

    def chunk_count(self) -> int:
        return int(self.db.execute("SELECT count(*) FROM chunks").fetchone()[0])

    # --- writing ------------------------------------------------------------------------
    def transaction(self) -> Any:
        """``with store.transaction():`` one write transaction (taken at once, so concurrent
        builders of the same index wait for each other instead of interleaving)."""
        return _Transaction(self.db)

    def replace_file(self, path: str, digest: str, size: int, mtime_ns: int, chunks: Sequence[NewChunk],
                     vectors: Sequence[Sequence[float]] | None) -> None:  # fmt: skip
        """Drop ``path``'s chunks and store the new ones (inside a transaction)."""
        self.remove_file(path)
        self.add_chunks(chunks, vectors)
        self.db.execute("INSERT INTO files(path, sha256, size, mtime_ns) VALUES (?, ?, ?, ?)", (path, digest, size, mtime_ns))

    def remove_file(self, path: str) -> None:
        ids = [r[0] for r in self.db.execute("SELECT id FROM chunks WHERE path = ?", (path,))]
        self.delete_chunks(ids)
        self.db.execute("DELETE FROM files WHERE path = ?", (path,))

    def add_chunks(self, chunks: Sequence[NewChunk], vectors: Sequence[Sequence[float]] | None = None) -> list[int]:
        ids = []
        for chunk in chunks:
            cursor = self.db.execute(
                "INSERT INTO chunks(path, seq, heading, position, text, collection, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (chunk.path, chunk.seq, chunk.heading, chunk.position, chunk.text, chunk.collection, chunk.created_at),
            )
            ids.append(int(cursor.lastrowid))
        if vectors is not None:
            self._add_vectors(ids, vectors)
        return ids

    def delete_chunks(self, ids: Iterable[int]) -> None:
        for chunk_id in ids:
            self.db.execute("DELETE FROM chunks WHERE id = ?", (chunk_id,))
            if self.vectors and self._has_vector_table():
                self.db.execute("DELETE FROM chunks_vec WHERE id = ?", (chunk_id,))

    def clear(self) -> None:
        """Forget every chunk and file (the chunking or embedding settings changed)."""
        self.db.execute("DELETE FROM chunks")
        self.db.execute("DELETE FROM files")
        if self.vectors:
            self.db.execute("DROP TABLE IF EXISTS chunks_vec")
        self.db.execute("DELETE FROM meta WHERE key = 'dimensions'")

    def _add_vectors(self, ids: Sequence[int], vectors: Sequence[Sequence[float]]) -> None:
        if not ids:
            return
        dimensions = len(vectors[0])
        if not self._has_vector_table():
            self.db.execute(f"CREATE VIRTUAL TABLE chunks_vec USING vec0(id INTEGER PRIMARY KEY, embedding float[{int(dimensions)}] distance_metric=cosine)")
            self.set_meta("dimensions", str(dimensions))
        sqlite_vec = importlib.import_module("sqlite_vec")
        for chunk_id, vector in zip(ids, vectors, strict=True):
            self.db.execute("INSERT INTO chunks_vec(id, embedding) VALUES (?, ?)", (chunk_id, sqlite_vec.serialize_float32(list(vector))))

    def _has_vector_table(self) -> bool:
        return self.db.execute("SELECT 1 FROM sqlite_master WHERE name = 'chunks_vec'").fetchone() is not None

    # --- reading ------------------------------------------------------------------------
    def bm25(self, query: str, k: int, collection: str | None = None) -> list[int]:
        """Ids of the ``k`` best chunks for ``query`` by BM25 (best first)."""
        match = fts_query(query)
        if not match:
            return []
        where, args = ("AND c.collection = ?", [collection]) if collection is not None else ("", [])
        rows = self.db.execute(
            f"SELECT c.id FROM chunks_fts JOIN chunks c ON c.id = chunks_fts.rowid WHERE chunks_fts MATCH ? {where} "
            "ORDER BY bm25(chunks_fts, 2.0, 1.0) LIMIT ?",
            [match, *args, k],
        )
        return [int(r[0]) for r in rows]

    def nearest(self, vector: Sequence[float], k: int) -> list[int]:
        """Ids of the ``k`` chunks nearest ``vector`` (cosine), best first."""
        if not self._has_vector_table():
            return []
        sqlite_vec = importlib.import_module("sqlite_vec")
        rows = self.db.execute(
            "SELECT id FROM chunks_vec WHERE embedding MATCH ? AND k = ? ORDER BY distance",
            (sqlite_vec.serialize_float32(list(vector)), k),
        )
        return [int(r[0]) for r in rows]

    def chunks(self, ids: Sequence[int]) -> list[StoredChunk]:
        """The chunks ``ids``, in that order."""
        if not ids:
            return []
        marks = ",".join("?" * len(ids))
        rows = self.db.execute(
            f"SELECT id, path, seq, heading, position, text, collection, created_at FROM chunks WHERE id IN ({marks})", list(ids)
        )
        found = {int(r[0]): StoredChunk(r[1], int(r[2]), r[3], r[4], r[5], r[6], float(r[7]), id=int(r[0])) for r in rows}
        return [found[i] for i in ids if i in found]

    def collection_ids(self, collection: str, newest_first: bool = True) -> list[int]:
        order = "DESC" if newest_first else "ASC"
        rows = self.db.execute(f"SELECT id FROM chunks WHERE collection = ? ORDER BY created_at {order}, id {order}", (collection,))
        return [int(r[0]) for r in rows]


class _Transaction:
    def __init__(self, db: Any):
        self.db = db

    def __enter__(self) -> None:
        self.db.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type: object, *rest: object) -> None:
        self.db.execute("ROLLBACK" if exc_type else "COMMIT")
