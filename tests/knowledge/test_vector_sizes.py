"""An embedder whose vectors change size (a model swapped behind one name): the file whose
vectors do not fit is a named problem with both sizes, the others are indexed, and a search
whose query vector does not fit is a tool failure saying so, not an error from sqlite-vec."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from runner.errors import ToolFailure
from runner.knowledge.base import KnowledgeBase
from runner.knowledge.spec import EmbeddingSpec, KnowledgeSpec


class SizedEmbedder:
    """Vectors of ``size`` numbers (changed by the test between calls)."""

    model = "swapped-model"

    def __init__(self, size: int) -> None:
        self.size = size

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [[1.0] + [0.0] * (self.size - 1) for _ in texts]


async def test_vectors_of_another_size_are_named_and_the_search_says_why(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# A\n\nAlpha text.\n")
    spec = KnowledgeSpec("docs", ("docs",), embeddings=EmbeddingSpec("swapped-model"))
    embedder = SizedEmbedder(4)
    base = KnowledgeBase(spec, tmp_path, tmp_path / "index.sqlite3", embedder)
    assert (await base.refresh()).problems == []
    embedder.size = 6
    (docs / "b.md").write_text("# B\n\nBeta text.\n")
    report = await base.refresh()
    assert report.problems == [
        "docs/b.md: the embeddings endpoint (swapped-model) returned vectors of 6 dimensions, but the index holds 4; "
        "the model behind the endpoint changed: rebuild the index (delete it) or point at the same model"
    ]
    with pytest.raises(ToolFailure, match="query vector of 6 dimensions, but the index holds 4"):
        await base.search("alpha")
    embedder.size = 4
    assert [hit.chunk.path for hit in await base.search("alpha")] == ["docs/a.md"]
    base.close()
