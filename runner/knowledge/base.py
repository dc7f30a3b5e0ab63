"""A knowledge base: its source files, kept indexed incrementally, searched with citations.

:meth:`KnowledgeBase.refresh` brings the index up to date: a file whose size and mtime are
unchanged is skipped, a changed one is hashed and re-chunked only when its content hash
differs, a file gone from the sources is dropped. Changing the chunking or embedding
settings rebuilds the whole index. :meth:`KnowledgeBase.search` ranks chunks by BM25, by
embedding similarity, or by both fused with reciprocal rank fusion (RRF, k=60).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol, TypeVar

from runner.core.sources import Source
from runner.errors import ConfigError, ToolFailure
from runner.knowledge.convert import MAX_SOURCE_BYTES, ConversionError
from runner.knowledge.file_chunks import ChunkSettings
from runner.knowledge.parse_process import DocumentParser
from runner.knowledge.source_files import source_files
from runner.knowledge.spec import KnowledgeSpec
from runner.knowledge.store import ChunkStore, NewChunk, StoredChunk

INDEX_FORMAT = "1"  # bump when conversion or chunking changes what a file turns into
RRF_K = 60
Key = TypeVar("Key", bound=Hashable)


class Embedder(Protocol):
    """Turns texts into vectors (an OpenAI-compatible endpoint, the embedded model)."""

    @property
    def model(self) -> str:
        """The model's name: an index built with another model is rebuilt."""

    async def embed(self, texts: Sequence[str]) -> list[list[float]]: ...


@dataclass(frozen=True)
class Hit:
    """A chunk found by a search, its rank (from 1) and where to cite it."""

    rank: int
    chunk: StoredChunk
    source: Source


@dataclass
class RefreshReport:
    """What one refresh did."""

    added: int = 0
    updated: int = 0
    removed: int = 0
    unchanged: int = 0
    chunks: int = 0
    problems: list[str] = field(default_factory=list)  # files that could not be read, and why

    def summary(self) -> str:
        return (
            f"{self.added} added, {self.updated} updated, {self.removed} removed, {self.unchanged} unchanged; "
            f"{self.chunks} chunks"
        )


@dataclass(frozen=True)
class _Planned:
    path: str
    digest: str
    size: int
    mtime_ns: int
    chunks: list[NewChunk]
    new: bool
    read_from: Path | None = None  # the file to parse into ``chunks`` (its content changed)


class KnowledgeBase:
    """One declared knowledge base over its SQLite index (``index_path``)."""

    def __init__(self, spec: KnowledgeSpec, root: Path, index_path: Path, embedder: Embedder | None = None):
        if spec.embeddings is not None and embedder is None:
            raise ConfigError(f"knowledge base '{spec.name}' declares embeddings but no embedder was given")
        self.spec, self.root, self.embedder = spec, root, embedder
        self.store = ChunkStore(index_path, vectors=spec.embeddings is not None)
        self._lock = asyncio.Lock()  # one connection: parallel steps take turns

    def close(self) -> None:
        self.store.close()

    async def refresh(self) -> RefreshReport:
        """Bring the index up to date with the source files."""
        async with self._lock:
            return await self._refresh()

    async def search(self, query: str, k: int | None = None) -> list[Hit]:
        """The best ``k`` chunks for ``query`` (default: the base's ``top_k``)."""
        async with self._lock:
            return await self._search(query, k)

    async def _refresh(self) -> RefreshReport:
        report = RefreshReport()
        await asyncio.to_thread(self._reset_if_settings_changed)
        planned, current = await asyncio.to_thread(self._plan, report)
        planned = await self._parse(planned, report)
        vectors = {p.path: await self._embed([_embedded_text(c) for c in p.chunks]) for p in planned} if self.embedder else {}
        await asyncio.to_thread(self._write, planned, current, vectors, report)
        report.chunks = await asyncio.to_thread(self.store.chunk_count)
        return report

    async def _search(self, query: str, k: int | None) -> list[Hit]:
        k = k or self.spec.top_k
        mode = self.spec.search_mode
        rankings: list[list[int]] = []
        depth = k * 4 if mode == "hybrid" else k
        if mode in ("bm25", "hybrid"):
            rankings.append(await asyncio.to_thread(self.store.bm25, query, depth))
        if mode in ("vector", "hybrid") and self.embedder is not None:
            (vector,) = await self._embed([query])
            dimensions = await asyncio.to_thread(self.store.meta, "dimensions")
            if dimensions is not None and len(vector) != int(dimensions):
                raise ToolFailure(
                    f"knowledge base '{self.spec.name}': the embeddings endpoint returned a query vector of {len(vector)} "
                    f"dimensions, but the index holds {dimensions}; the model behind the endpoint changed (run runner index again)"
                )
            rankings.append(await asyncio.to_thread(self.store.nearest, vector, depth))
        ids = reciprocal_rank_fusion(rankings)[:k]
        chunks = await asyncio.to_thread(self.store.chunks, ids)
        return [Hit(rank, chunk, self.source_of(chunk)) for rank, chunk in enumerate(chunks, 1)]

    def source_of(self, chunk: StoredChunk) -> Source:
        title = chunk.heading.rsplit(" > ", 1)[-1] if chunk.heading else Path(chunk.path).name
        return Source("knowledge", chunk.path, title, chunk.heading, chunk.position, self.spec.name)

    # --- refresh steps --------------------------------------------------------------------
    def _settings(self) -> str:
        embeddings = self.spec.embeddings
        return json.dumps(
            [INDEX_FORMAT, self.spec.max_chunk_chars, self.spec.overlap_chars, embeddings and [embeddings.provider, embeddings.model]]
        )

    def _reset_if_settings_changed(self) -> None:
        settings = self._settings()
        if self.store.meta("settings") != settings:
            with self.store.transaction():
                self.store.clear()
                self.store.set_meta("settings", settings)

    def _plan(self, report: RefreshReport) -> tuple[list[_Planned], set[str]]:
        known = self.store.files()
        planned: list[_Planned] = []
        current: set[str] = set()
        files = source_files(self.spec.sources, self.root)
        if not files:
            report.problems.append(f"its sources ({', '.join(self.spec.sources)}) match no .md, .txt, .html, .pdf or .docx file")
        for relative, path in files:
            current.add(relative)
            info = path.stat()
            old = known.get(relative)
            if old is not None and old[1:] == (info.st_size, info.st_mtime_ns):
                report.unchanged += 1
                continue
            if info.st_size > MAX_SOURCE_BYTES:  # before reading it: a huge file is refused, not loaded
                report.problems.append(f"{relative}: larger than {MAX_SOURCE_BYTES // 1_000_000} MB; split it or leave it out")
                continue
            try:
                data = path.read_bytes()
            except OSError as exc:
                report.problems.append(f"{relative}: cannot be read ({exc.strerror or exc})")
                continue
            digest = hashlib.sha256(data).hexdigest()
            if old is not None and old[0] == digest:
                planned.append(_Planned(relative, digest, info.st_size, info.st_mtime_ns, [], new=False))
                continue
            planned.append(_Planned(relative, digest, info.st_size, info.st_mtime_ns, [], new=old is None, read_from=path))
        return planned, current

    async def _parse(self, planned: list[_Planned], report: RefreshReport) -> list[_Planned]:
        """``planned`` with the chunks of each file whose content changed, parsed in a child
        process under the base's limits; a file that cannot be read is a problem, left out."""
        parsed: list[_Planned] = []
        parser = DocumentParser(ChunkSettings(self.spec.max_chunk_chars, self.spec.overlap_chars, self.spec.limits))
        try:
            for item in planned:
                if item.read_from is None:
                    parsed.append(item)
                    continue
                try:
                    chunks = await parser.chunks(item.read_from, item.path)
                except ConversionError as exc:
                    report.problems.append(f"{item.path}: {exc}")
                    continue
                parsed.append(replace(item, chunks=chunks, read_from=None))
        finally:
            await parser.close()  # also when the refresh is cancelled: no parse outlives it
        return parsed

    async def _embed(self, texts: list[str]) -> list[list[float]]:
        assert self.embedder is not None
        if not texts:
            return []
        return await self.embedder.embed(texts)

    def _write(self, planned: list[_Planned], current: set[str], vectors: dict[str, list[list[float]]], report: RefreshReport) -> None:
        with self.store.transaction():
            known = self.store.files()  # read under the write lock: another builder may have just written
            dimensions = self.store.meta("dimensions")
            for item in planned:
                problem = _vector_problem(item.path, vectors.get(item.path), dimensions, self.spec)
                if problem is not None:
                    report.problems.append(problem)
                    continue
                if vectors.get(item.path):
                    dimensions = dimensions or str(len(vectors[item.path][0]))
                if known.get(item.path, ("",))[0] == item.digest and not item.chunks:
                    report.unchanged += 1  # content unchanged, only touched: keep its chunks
                    self.store.db.execute("UPDATE files SET size = ?, mtime_ns = ? WHERE path = ?", (item.size, item.mtime_ns, item.path))
                    continue
                self.store.replace_file(item.path, item.digest, item.size, item.mtime_ns, item.chunks, vectors.get(item.path))
                report.added += item.new
                report.updated += not item.new
            for gone in set(known) - current:
                self.store.remove_file(gone)
                report.removed += 1


def reciprocal_rank_fusion(rankings: Sequence[Sequence[Key]], k: int = RRF_K) -> list[Key]:
    """Items ordered by the sum of ``1 / (k + rank)`` over the rankings they appear in (ties:
    first seen first)."""
    scores: dict[Key, float] = {}
    for ranking in rankings:
        for rank, item in enumerate(ranking, 1):
            scores[item] = scores.get(item, 0.0) + 1.0 / (k + rank)
    return sorted(scores, key=lambda item: -scores[item])


def _vector_problem(path: str, vectors: list[list[float]] | None, dimensions: str | None, spec: KnowledgeSpec) -> str | None:
    """Why ``path``'s vectors cannot join the index (another size than the index's, or than
    each other), or ``None``. An endpoint that changes its vector size between files (a
    model swapped behind the same name) is named with both sizes, not a vector-table error."""
    if not vectors:
        return None
    sizes = sorted({len(vector) for vector in vectors})
    expected = int(dimensions) if dimensions else sizes[0]
    if sizes == [expected] and expected > 0:
        return None
    got = ", ".join(map(str, sizes))
    model = spec.embeddings.model if spec.embeddings is not None else "the embedder"
    return (
        f"{path}: the embeddings endpoint ({model}) returned vectors of {got} dimensions, but the index holds "
        f"{expected}; the model behind the endpoint changed: rebuild the index (delete it) or point at the same model"
    )


def _embedded_text(chunk: NewChunk) -> str:
    return f"{chunk.heading}\n{chunk.text}" if chunk.heading else chunk.text
