"""Chunking by structure: headings give the path, paragraphs are packed, neighbours overlap."""

from __future__ import annotations

import itertools

from runner.knowledge.chunking import chunk_markdown

DOC = """\
# Guide

Intro paragraph.

## Setup

First setup paragraph.

Second setup paragraph.

### Linux

Linux steps.

```sh
# not a heading inside a fence

make install
```

## Usage

Usage text.
"""


def test_sections_carry_their_heading_path_and_source_lines() -> None:
    chunks = chunk_markdown(DOC, max_chars=1000, overlap_chars=0)
    assert [(c.heading, c.first_line, c.last_line) for c in chunks] == [
        ("Guide", 3, 3),
        ("Guide > Setup", 7, 9),
        ("Guide > Setup > Linux", 13, 19),
        ("Guide > Usage", 23, 23),
    ]
    assert "# not a heading inside a fence\n\nmake install" in chunks[2].text  # a code block stays whole


def test_paragraphs_are_packed_up_to_the_limit_with_overlap() -> None:
    paragraphs = [f"Paragraph {i} " + "word " * 30 for i in range(6)]
    text = "# Long\n\n" + "\n\n".join(paragraphs)
    chunks = chunk_markdown(text, max_chars=400, overlap_chars=200)
    assert all(len(c.text) <= 400 for c in chunks)
    assert len(chunks) >= 3
    for before, after in itertools.pairwise(chunks):
        last = before.text.split("\n\n")[-1]
        assert after.text.startswith(last)  # the next chunk repeats the previous one's last paragraph
    joined = "\n\n".join(chunks[i].text for i in range(len(chunks)))
    assert all(p.strip() in joined for p in paragraphs)


def test_without_overlap_no_paragraph_repeats() -> None:
    paragraphs = [f"P{i} " + "x" * 150 for i in range(6)]
    chunks = chunk_markdown("\n\n".join(paragraphs), max_chars=400, overlap_chars=0)
    assert sum(c.text.count("P") for c in chunks) == 6


def test_a_paragraph_longer_than_a_chunk_is_cut_at_sentences_then_hard() -> None:
    sentences = " ".join(f"Sentence number {i} is here." for i in range(40))
    chunks = chunk_markdown(sentences + "\n\n" + "y" * 1000, max_chars=300, overlap_chars=0)
    assert all(len(c.text) <= 300 for c in chunks)
    assert chunks[0].text.startswith("Sentence number 0 is here.") and chunks[0].text.endswith(".")
    assert sum(c.text.count("y") for c in chunks) == 1000


def test_empty_and_heading_only_documents_have_no_chunks() -> None:
    assert chunk_markdown("") == []
    assert chunk_markdown("# Only a heading\n\n## And another\n") == []
