"""One source file to the chunks the index stores: converted (:mod:`runner.knowledge.convert`),
then chunked by structure (:mod:`runner.knowledge.chunking`), each chunk with where to cite it.

This is the whole of what runner does with an outside document's bytes, so it is what
:mod:`runner.knowledge.parse_worker` runs in a child process under a deadline.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from runner.knowledge.chunking import chunk_markdown
from runner.knowledge.convert import Part, convert
from runner.knowledge.limits import DEFAULT_LIMITS, ConversionLimits, ZipLimits
from runner.knowledge.store import NewChunk


@dataclass(frozen=True)
class ChunkSettings:
    """How a knowledge base reads its files: chunk sizes and the limits of one file's parse."""

    max_chars: int = 1200
    overlap_chars: int = 200
    limits: ConversionLimits = DEFAULT_LIMITS

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ChunkSettings:
        limits = dict(data["limits"])
        zip_limits = ZipLimits(**limits.pop("zip"))
        return cls(data["max_chars"], data["overlap_chars"], ConversionLimits(**limits, zip=zip_limits))


def file_chunks(path: Path, relative: str, settings: ChunkSettings) -> list[NewChunk]:
    """The chunks of the file at ``path`` (``relative``: its name in the index). Raises
    :class:`~runner.knowledge.convert.ConversionError` naming the file."""
    chunks: list[NewChunk] = []
    for part in convert(path, settings.limits):
        for piece in chunk_markdown(part.text, settings.max_chars, settings.overlap_chars):
            seq = len(chunks) + 1
            chunks.append(NewChunk(relative, seq, piece.heading, _position(part, piece.first_line, piece.last_line, seq), piece.text))
    return chunks


def _position(part: Part, first: int, last: int, seq: int) -> str:
    if part.page is not None:
        return f"page {part.page}"
    if part.lines_are_source:
        return f"line {first}" if first == last else f"lines {first}-{last}"
    return f"part {seq}"
