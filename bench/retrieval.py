"""Retrieval quality of knowledge bases: recall@5 and MRR for BM25, embeddings and hybrid.

The corpus (``bench/retrieval_corpus/``, 12 short Markdown documents, 36 sections, written for
this benchmark) and its 36 questions (``bench/retrieval_questions.yaml``, each with the file and
section that answers it, worded as a person would ask) go through the real pipeline:
:class:`runner.knowledge.base.KnowledgeBase` converts, chunks, indexes (SQLite FTS5,
sqlite-vec) and searches. Methods:

  bm25              FTS5 BM25 (no model, offline)
  vector/local      embeddings from the embedded model (SmolLM2-135M via llama.cpp, mean-pooled;
                    a chat model, not an embedding model), where runner[local] is installed
  hybrid/local      BM25 and vector/local fused by reciprocal rank fusion
  vector/hashed     the loopback server's bag-of-words vectors (runner.model.server: hashed
                    words, no model at all), through the real /v1/embeddings client: a baseline
  hybrid/hashed     BM25 and vector/hashed fused

    .venv/bin/python bench/retrieval.py          # about 20 s on 2 cores (the local model's part)
"""

from __future__ import annotations

import asyncio
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from runner.knowledge.base import Embedder, KnowledgeBase
from runner.knowledge.spec import EmbeddingSpec, KnowledgeSpec, SearchMode

HERE = Path(__file__).resolve().parent
K = 5


def questions() -> list[dict[str, str]]:
    loaded: list[dict[str, str]] = yaml.safe_load((HERE / "retrieval_questions.yaml").read_text())
    return loaded


async def evaluate(root: Path, name: str, mode: SearchMode, embedder: Embedder | None) -> tuple[float, float]:
    """(recall@K, MRR) of one method over every question."""
    spec = KnowledgeSpec(name, ("corpus",), mode=mode, top_k=K, embeddings=EmbeddingSpec(embedder.model) if embedder else None)
    base = KnowledgeBase(spec, root, root / f"{name}.sqlite3", embedder)
    await base.refresh()
    hits_at_k, reciprocal = 0, 0.0
    for item in questions():
        found = await base.search(item["q"], K)
        ranks = [h.rank for h in found if h.chunk.path == f"corpus/{item['file']}" and h.chunk.heading.endswith(item["section"])]
        if ranks:
            hits_at_k += 1
            reciprocal += 1.0 / ranks[0]
    base.close()
    total = len(questions())
    return hits_at_k / total, reciprocal / total


async def local_embedder() -> Any:
    from runner.model.embeddings import LocalEmbedder
    from runner.model.local import local_model_available

    return LocalEmbedder() if local_model_available() else None


async def main() -> int:
    from runner.model.embeddings import OpenAIEmbedder
    from runner.model.server import ScriptedServer

    root = Path(tempfile.mkdtemp(prefix="runner-retrieval-"))
    shutil.copytree(HERE / "retrieval_corpus", root / "corpus")
    rows: list[tuple[str, float, float]] = []
    try:
        rows.append(("bm25", *await evaluate(root, "bm25", "bm25", None)))
        local = await local_embedder()
        if local is None:
            print("note: the embedded model is not installed (pip install 'runner[local]'): vector/local skipped", file=sys.stderr)
        else:
            rows.append(("vector/local", *await evaluate(root, "local", "vector", local)))
            rows.append(("hybrid/local", *await evaluate(root, "local", "hybrid", local)))
            await local.aclose()
        with ScriptedServer() as server:
            hashed = OpenAIEmbedder("hashed-bow", base_url=server.base_url, api_key="bench")
            rows.append(("vector/hashed", *await evaluate(root, "hashed", "vector", hashed)))
            rows.append(("hybrid/hashed", *await evaluate(root, "hashed", "hybrid", hashed)))
            await hashed.aclose()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"{len(questions())} questions, 36 sections in 12 documents")
    print(f"{'method':<16}{'recall@' + str(K):>10}{'MRR':>8}")
    for method, recall, mrr in rows:
        print(f"{method:<16}{recall:>10.2f}{mrr:>8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
