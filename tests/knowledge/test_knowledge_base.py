"""A knowledge base over real files: incremental refresh by content hash, BM25 search with
citations, embeddings from the loopback server in a sqlite-vec index, fusion, memory."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from runner.knowledge.base import KnowledgeBase, reciprocal_rank_fusion
from runner.knowledge.memory import MemoryScope, MemoryStore
from runner.knowledge.spec import EmbeddingSpec, KnowledgeSpec
from runner.model.embeddings import OpenAIEmbedder
from runner.model.server import ScriptedServer

from .documents import write_docs, write_pdf


def base(root: Path, **spec: object) -> KnowledgeBase:
    return KnowledgeBase(KnowledgeSpec("docs", ("docs",), **spec), root, root / ".runner/knowledge/docs.sqlite3")  # type: ignore[arg-type]


async def test_every_document_type_is_indexed_and_cited(tmp_path: Path) -> None:
    write_docs(tmp_path / "docs")
    kb = base(tmp_path)
    report = await kb.refresh()
    assert (report.added, report.problems) == (6, [])
    cases = {
        "annual plans refunded": ("docs/billing.md", "Billing > Refunds", "lines 7-9"),
        "student discount": ("docs/faq.html", "Frequently asked questions > Is there a student discount?", "part 2"),
        "encrypted at rest": ("docs/security.docx", "Security policy", "part 1"),
        "serial number claims": ("docs/warranty.pdf", "", "page 2"),
        "support hours": ("docs/notes.txt", "", "lines 1-3"),
        "error E42 licence port": ("docs/install.md", "Installing Widgetizer > Troubleshooting", "line 7"),
    }
    for query, (path, heading, position) in cases.items():
        (first, *_) = await kb.search(query)
        assert (first.chunk.path, first.chunk.heading, first.chunk.position) == (path, heading, position), query
        assert first.source.kind == "knowledge" and first.source.collection == "docs"
    kb.close()


async def test_refresh_is_incremental_by_content_hash(tmp_path: Path) -> None:
    docs = write_docs(tmp_path / "docs")
    kb = base(tmp_path)
    await kb.refresh()
    assert (await kb.refresh()).unchanged == 6
    os.utime(docs / "notes.txt", ns=(1, 1))  # touched, same content: not re-chunked
    again = await kb.refresh()
    assert (again.updated, again.unchanged) == (0, 6)
    (docs / "billing.md").write_text("# Billing\n\nRefunds are no longer offered.\n")
    (docs / "install.md").unlink()
    (docs / "new.md").write_text("# New\n\nA brand new page about quantum widgets.\n")
    changed = await kb.refresh()
    assert (changed.added, changed.updated, changed.removed, changed.unchanged) == (1, 1, 1, 4)
    assert [h.chunk.path for h in await kb.search("quantum widgets")] == ["docs/new.md"]
    assert await kb.search("E42") == []
    assert "pro rata" not in " ".join(h.chunk.text for h in await kb.search("refunds"))
    kb.close()


async def test_changing_the_chunk_settings_rebuilds_the_index(tmp_path: Path) -> None:
    write_docs(tmp_path / "docs")
    first = base(tmp_path)
    await first.refresh()
    first.close()
    rebuilt = base(tmp_path, max_chunk_chars=300)
    assert (await rebuilt.refresh()).added == 6
    rebuilt.close()


async def test_unreadable_files_are_reported_and_the_rest_indexed(tmp_path: Path) -> None:
    docs = write_docs(tmp_path / "docs")
    (docs / "broken.pdf").write_bytes(b"%PDF-1.4 this is not really a pdf")
    (docs / "latin1.txt").write_bytes("caf\xe9".encode("latin-1"))
    report = await base(tmp_path).refresh()
    assert report.added == 6
    assert sorted(p.split(":")[0] for p in report.problems) == ["docs/broken.pdf", "docs/latin1.txt"]


async def test_query_syntax_cannot_break_the_full_text_search(tmp_path: Path) -> None:
    write_docs(tmp_path / "docs")
    kb = base(tmp_path)
    await kb.refresh()
    for query in ['"unbalanced', "NEAR(a b)", "refund*", "text:refund", "-- ; DROP TABLE chunks", "()", "!!!"]:
        await kb.search(query)  # no exception
    assert (await kb.search("AND OR NOT refunded"))[0].chunk.path == "docs/billing.md"


async def test_embeddings_from_the_loopback_endpoint_vector_and_hybrid_search(tmp_path: Path) -> None:
    write_docs(tmp_path / "docs")
    write_pdf(tmp_path / "docs" / "extra.pdf", ["Widgets ship in recyclable packaging."])
    with ScriptedServer() as server:
        embedder = OpenAIEmbedder("test-embed", base_url=server.base_url, api_key="sk-embed-0123456789", batch_size=4)
        spec = KnowledgeSpec("docs", ("docs",), embeddings=EmbeddingSpec("test-embed"), mode="vector")
        kb = KnowledgeBase(spec, tmp_path, tmp_path / "index.sqlite3", embedder)
        report = await kb.refresh()
        batches = [r for r in server.requests if r.rule == "embeddings"]
        assert sum(len(r.body["input"]) for r in batches) == report.chunks > 7
        assert all(len(r.body["input"]) <= 4 for r in batches) and batches[0].body["model"] == "test-embed"
        hits = await kb.search("packaging recyclable")
        assert hits[0].chunk.path == "docs/extra.pdf"
        assert kb.store.meta("dimensions") == "256"
        kb.close()
        hybrid = KnowledgeBase(KnowledgeSpec("docs", ("docs",), embeddings=EmbeddingSpec("test-embed")), tmp_path, tmp_path / "index.sqlite3", embedder)
        assert (await hybrid.refresh()).unchanged == 7  # same settings: nothing re-embedded
        assert (await hybrid.search("annual refund"))[0].chunk.heading == "Billing > Refunds"
        hybrid.close()
        await embedder.aclose()


def test_reciprocal_rank_fusion_rewards_agreement() -> None:
    assert reciprocal_rank_fusion([[1, 2, 3], [3, 2, 4]]) == [3, 2, 1, 4]  # 1/63+1/61 > 2/62 > 1/61
    assert reciprocal_rank_fusion([[5, 6]]) == [5, 6]
    assert reciprocal_rank_fusion([]) == []


async def test_memory_scopes_and_retention(tmp_path: Path) -> None:
    store = MemoryStore(tmp_path / "memory.sqlite3")
    mine, theirs = MemoryScope("agent:a", max_entries=3), MemoryScope("agent:b")
    for i in range(5):
        await store.remember(mine, f"note {i} about customer acme", now=1000.0 + i)
    await store.remember(theirs, "acme prefers email", now=1000.0)
    kept = await store.recall(mine, "acme", k=10, now=1010.0)
    assert sorted(n.text for n in kept) == ["note 2 about customer acme", "note 3 about customer acme", "note 4 about customer acme"]
    assert [n.text for n in await store.recall(theirs, "acme", now=1010.0)] == ["acme prefers email"]
    assert [n.text for n in await store.recall(mine, "", k=1, now=1010.0)] == ["note 4 about customer acme"]  # newest
    aging = MemoryScope("agent:a", max_entries=3, max_age_days=1)
    assert await store.recall(aging, "acme", now=1000.0 + 2 * 86400) == []
    store.close()


@pytest.mark.parametrize("pattern", ["/etc", "../outside", "docs/../../x", "~/docs"])
def test_sources_outside_the_project_are_refused(tmp_path: Path, pattern: str) -> None:
    from runner.errors import ConfigError
    from runner.knowledge.source_files import source_files

    with pytest.raises(ConfigError, match=r"absolute|leaves the project"):
        source_files([pattern], tmp_path)


def test_links_out_of_the_project_and_hidden_files_are_skipped(tmp_path: Path) -> None:
    from runner.knowledge.source_files import source_files

    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.md").write_text("secret")
    project = tmp_path / "project"
    docs = write_docs(project / "docs")
    (docs / "link.md").symlink_to(outside / "secret.md")
    (docs / "linkdir").symlink_to(outside)
    (docs / ".hidden.md").write_text("hidden")
    found = [relative for relative, _ in source_files(["docs", "docs/**/*.md"], project)]
    assert found == ["docs/billing.md", "docs/faq.html", "docs/install.md", "docs/notes.txt", "docs/security.docx", "docs/warranty.pdf"]
