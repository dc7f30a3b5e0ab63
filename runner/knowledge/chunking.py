"""Chunking by structure: Markdown sections, then paragraphs, packed up to a size, with overlap.

A section runs from one heading to the next; its chunks carry the heading path
(``Billing > Refunds``). Paragraphs (and fenced code blocks, whole) are packed into a
chunk until ``max_chars``; the next chunk of the same section starts with the last
paragraphs of the previous one, up to ``overlap_chars``, so a fact cut by a boundary is
still found whole. A paragraph longer than ``max_chars`` is cut at sentence ends.

The text is an outside document: every pattern here runs in linear time (no nested or
adjacent unbounded repeats that can backtrack), and a heading's closing ``#`` run is
stripped with string methods, not a regular expression.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

HEADING = re.compile(r"(#{1,6})[ \t]+(\S.*)")  # matched from the line start; the title's tail is trimmed by _heading
FENCE = re.compile(r"[ \t]*(```|~~~)")
SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


@dataclass(frozen=True)
class Block:
    """A paragraph or code block and the lines (from 1) it spans."""

    text: str
    first_line: int
    last_line: int


@dataclass(frozen=True)
class Chunk:
    """A piece of a document to index: its text, heading path and lines (from 1)."""

    text: str
    heading: str
    first_line: int
    last_line: int


def chunk_markdown(text: str, max_chars: int = 1200, overlap_chars: int = 200) -> list[Chunk]:
    """The chunks of one document (Markdown or plain text)."""
    chunks: list[Chunk] = []
    for heading, blocks in _sections(text.splitlines()):
        chunks.extend(_pack(heading, _fit(blocks, max_chars), max_chars, overlap_chars))
    return chunks


def _sections(lines: list[str]) -> list[tuple[str, list[Block]]]:
    """``(heading path, blocks)`` per section, in order."""
    sections: list[tuple[str, list[Block]]] = []
    path: list[tuple[int, str]] = []
    blocks: list[Block] = []
    current: list[str] = []
    start = 0
    in_fence = False

    def flush_block(end: int) -> None:
        nonlocal current
        body = "\n".join(current).strip()
        if body:
            blocks.append(Block(body, start, end))
        current = []

    for number, line in enumerate(lines, 1):
        if FENCE.match(line):
            in_fence = not in_fence
        heading = None if in_fence else _heading(line)
        if heading:
            flush_block(number - 1)
            sections.append((_path(path), blocks))
            level, title = heading
            path = [(lvl, old) for lvl, old in path if lvl < level] + [(level, title)]
            blocks = []
        elif not line.strip() and not in_fence:
            flush_block(number - 1)
        else:
            if not current:
                start = number
            current.append(line)
    flush_block(len(lines))
    sections.append((_path(path), blocks))
    return [(heading, found) for heading, found in sections if found]


def _heading(line: str) -> tuple[int, str] | None:
    """``(level, title)`` of an ATX heading line (``## Title ##``), else ``None``. A closing
    run of ``#`` counts only after a space (``# C#`` keeps its ``#``)."""
    match = HEADING.match(line)
    if match is None:
        return None
    title = match.group(2).rstrip()
    closed = title.rstrip("#")
    if closed != title and (not closed or closed[-1] in " \t"):
        title = closed.rstrip()
    return (len(match.group(1)), title) if title else None


def _path(path: list[tuple[int, str]]) -> str:
    return " > ".join(title for _, title in path)


def _fit(blocks: list[Block], max_chars: int) -> list[Block]:
    """Blocks no longer than ``max_chars``: long ones cut at sentence ends (or hard)."""
    fitted: list[Block] = []
    for block in blocks:
        if len(block.text) <= max_chars:
            fitted.append(block)
            continue
        piece = ""
        for sentence in SENTENCE_END.split(block.text):
            while len(sentence) > max_chars:  # one endless sentence: cut it hard
                if piece:
                    fitted.append(Block(piece, block.first_line, block.last_line))
                    piece = ""
                fitted.append(Block(sentence[:max_chars], block.first_line, block.last_line))
                sentence = sentence[max_chars:]
            if piece and len(piece) + 1 + len(sentence) > max_chars:
                fitted.append(Block(piece, block.first_line, block.last_line))
                piece = ""
            piece = f"{piece} {sentence}".strip()
        if piece:
            fitted.append(Block(piece, block.first_line, block.last_line))
    return fitted


def _pack(heading: str, blocks: list[Block], max_chars: int, overlap_chars: int) -> list[Chunk]:
    chunks: list[Chunk] = []
    window: list[Block] = []
    fresh = 0  # blocks in the window not yet in any chunk
    for block in blocks:
        if window and _size(window) + 2 + len(block.text) > max_chars:
            if fresh:
                chunks.append(_chunk(heading, window))
            window, fresh = _overlap(window, overlap_chars, max_chars - len(block.text) - 2), 0
        window.append(block)
        fresh += 1
    if window and fresh:
        chunks.append(_chunk(heading, window))
    return chunks


def _overlap(window: list[Block], overlap_chars: int, room: int) -> list[Block]:
    """The last blocks of ``window`` that fit in the overlap (and leave room for the next block)."""
    kept: list[Block] = []
    for block in reversed(window):
        if _size([block, *kept]) > min(overlap_chars, room):
            break
        kept.insert(0, block)
    return kept


def _size(blocks: list[Block]) -> int:
    return sum(len(b.text) for b in blocks) + 2 * max(len(blocks) - 1, 0)


def _chunk(heading: str, blocks: list[Block]) -> Chunk:
    return Chunk("\n\n".join(b.text for b in blocks), heading, blocks[0].first_line, blocks[-1].last_line)
