"""The parsers of outside documents under their limits (runner.knowledge.convert,
bounded_zip) and the heading pattern's behaviour after it was made linear."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from runner.knowledge.bounded_zip import ZipLimitError, ZipLimits, ZipUnreadable, bounded_copy
from runner.knowledge.chunking import chunk_markdown
from runner.knowledge.convert import ConversionError, ConversionLimits, convert

from .documents import write_docx, write_pdf


@pytest.mark.parametrize(("line", "heading"), [
    ("# Title", "Title"), ("## Title ##", "Title"), ("### C#", "C#"), ("# a #b", "a #b"), ("#\tTabbed  ", "Tabbed"),
    ("# x" + " " * 8000 + "y", "x" + " " * 8000 + "y"), ("####### seven", ""), ("#nospace", ""),
])  # fmt: skip
def test_headings(line: str, heading: str) -> None:
    [chunk] = chunk_markdown(f"{line}\n\nbody\n", max_chars=100_000)
    assert chunk.heading == heading


def test_many_lines_of_spaces_and_hashes_chunk_in_linear_time() -> None:
    text = ("# " + " " * 2000 + "#" * 3 + " " * 2000 + "x\n\nbody\n\n") * 200  # cubic before: minutes
    chunks = chunk_markdown(text)
    assert len(chunks) == 200 and chunks[0].heading == "#" * 3 + " " * 2000 + "x"


def test_pages_characters_and_seconds_are_bounded(tmp_path: Path) -> None:
    write_pdf(tmp_path / "three.pdf", ["one page", "two pages", "three pages"])
    with pytest.raises(ConversionError, match="has 3 pages, more than 2"):
        convert(tmp_path / "three.pdf", ConversionLimits(max_pages=2))
    with pytest.raises(ConversionError, match="more than 10 characters"):
        convert(tmp_path / "three.pdf", ConversionLimits(max_chars=10))
    with pytest.raises(ConversionError, match="took longer than 0 s"):
        convert(tmp_path / "three.pdf", ConversionLimits(max_seconds=0))
    assert [p.text for p in convert(tmp_path / "three.pdf")] == ["one page", "two pages", "three pages"]


def test_a_docx_is_read_from_a_bounded_copy_without_its_media(tmp_path: Path) -> None:
    write_docx(tmp_path / "real.docx")
    with zipfile.ZipFile(tmp_path / "real.docx", "a") as archive:
        archive.writestr("word/media/big.png", b"\0" * 5_000_000)  # not text: never inflated into the copy
    parts = convert(tmp_path / "real.docx", ConversionLimits(zip=ZipLimits(max_inflated_bytes=2_000_000)))
    assert "Security policy" in parts[0].text
    with pytest.raises(ConversionError, match="inflates to more than"):
        convert(tmp_path / "real.docx", ConversionLimits(zip=ZipLimits(max_inflated_bytes=1_000)))


def test_a_damaged_zip_is_a_named_error(tmp_path: Path) -> None:
    write_docx(tmp_path / "real.docx")
    data = bytearray((tmp_path / "real.docx").read_bytes())
    data[len(data) // 3 : len(data) // 3 + 200] = b"\xff" * 200
    (tmp_path / "broken.docx").write_bytes(bytes(data))
    with pytest.raises((ConversionError, ZipLimitError)):
        convert(tmp_path / "broken.docx")
    (tmp_path / "notzip.docx").write_bytes(b"PK\x03\x04 not really")
    with pytest.raises(ZipUnreadable, match="BadZipFile"):
        bounded_copy(tmp_path / "notzip.docx", ZipLimits())
