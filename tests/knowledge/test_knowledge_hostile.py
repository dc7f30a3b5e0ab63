"""Source files a knowledge base must not choke on: a file over the size limit is reported
without being read into memory (a sparse 60 MB file: reading it would show in the time and
memory of this test), a FIFO among the sources is skipped rather than waited on."""

from __future__ import annotations

import os
from pathlib import Path

from runner.knowledge.base import KnowledgeBase
from runner.knowledge.convert import MAX_SOURCE_BYTES
from runner.knowledge.spec import KnowledgeSpec

from .documents import write_docs


async def test_an_oversized_source_is_reported_unread_and_a_fifo_is_skipped(tmp_path: Path) -> None:
    docs = write_docs(tmp_path / "docs")
    with open(docs / "huge.md", "wb") as handle:
        handle.truncate(MAX_SOURCE_BYTES + 1)
    os.mkfifo(docs / "pipe.md")
    base = KnowledgeBase(KnowledgeSpec("docs", ("docs",)), tmp_path, tmp_path / ".runner/knowledge/docs.sqlite3")
    report = await base.refresh()
    assert report.added == 6
    assert report.problems == [f"docs/huge.md: larger than {MAX_SOURCE_BYTES // 1_000_000} MB; split it or leave it out"]
