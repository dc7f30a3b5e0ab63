"""Source files to text with structure: Markdown headings kept, pages numbered.

Markdown and plain text are read as they are (UTF-8). HTML goes through trafilatura (the main
content as Markdown, navigation and boilerplate dropped), PDF through pypdf (one part per
page), DOCX through python-docx (heading styles become Markdown headings). Those three need
the ``knowledge`` extra; a missing library is a clear error naming it.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner.errors import ConfigError

TEXT_SUFFIXES = frozenset({".md", ".markdown", ".txt", ".text", ".rst"})
SUPPORTED_SUFFIXES = TEXT_SUFFIXES | {".html", ".htm", ".pdf", ".docx"}
INSTALL_HINT = "pip install 'runner[knowledge]'"
MAX_SOURCE_BYTES = 50_000_000


class ConversionError(Exception):
    """A source file that cannot be read as a document (named in the message)."""


@dataclass(frozen=True)
class Part:
    """Converted text of a file, or of one page of it (``page`` from 1). ``lines_are_source``:
    line numbers in ``text`` are the file's own (Markdown, text), so citations can give them."""

    text: str
    page: int | None = None
    lines_are_source: bool = False


def convert(path: Path) -> list[Part]:
    """The parts of one source file, by its suffix."""
    suffix = path.suffix.lower()
    if path.stat().st_size > MAX_SOURCE_BYTES:
        raise ConversionError(f"{path.name} is larger than {MAX_SOURCE_BYTES // 1_000_000} MB")
    if suffix in TEXT_SUFFIXES:
        return [Part(_utf8(path), lines_are_source=True)]
    if suffix in (".html", ".htm"):
        return [Part(_html(path))]
    if suffix == ".pdf":
        return _pdf(path)
    if suffix == ".docx":
        return [Part(_docx(path))]
    raise ConversionError(f"{path.name}: unsupported file type (use {', '.join(sorted(SUPPORTED_SUFFIXES))})")


def _utf8(path: Path) -> str:
    try:
        return path.read_text("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        raise ConversionError(f"{path.name} is not UTF-8 text (byte {exc.start})") from None


def _library(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError:
        raise ConfigError(f"reading this file type needs the '{name}' package: {INSTALL_HINT}") from None


def _html(path: Path) -> str:
    trafilatura = _library("trafilatura")
    html = path.read_bytes().decode("utf-8", "replace")
    text = trafilatura.extract(html, output_format="markdown", include_formatting=True, include_links=False, favor_recall=True)
    return str(text or "")


def _pdf(path: Path) -> list[Part]:
    pypdf = _library("pypdf")
    try:
        reader = pypdf.PdfReader(str(path))
        return [Part(page.extract_text() or "", page=number) for number, page in enumerate(reader.pages, 1)]
    except pypdf.errors.PyPdfError as exc:
        raise ConversionError(f"{path.name} is not a readable PDF ({exc})") from None


def _docx(path: Path) -> str:
    docx = _library("docx")
    try:
        document = docx.Document(str(path))
    except Exception as exc:  # python-docx raises zipfile/KeyError/ValueError for damaged files: name the file
        raise ConversionError(f"{path.name} is not a readable DOCX ({type(exc).__name__})") from None
    lines: list[str] = []
    for paragraph in document.paragraphs:
        text = paragraph.text.strip()
        if not text:
            continue
        style = (paragraph.style.name or "") if paragraph.style is not None else ""
        level = _heading_level(style)
        lines.append(f"{'#' * level} {text}" if level else text)
        lines.append("")
    return "\n".join(lines)


def _heading_level(style: str) -> int:
    """``Heading 2`` -> 2, ``Title`` -> 1, anything else -> 0."""
    if style == "Title":
        return 1
    if style.startswith("Heading "):
        tail = style.removeprefix("Heading ").strip()
        return min(int(tail), 6) if tail.isdigit() else 0
    return 0
