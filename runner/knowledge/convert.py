"""Source files to text with structure: Markdown headings kept, pages numbered.

Markdown and plain text are read as they are (UTF-8). HTML goes through trafilatura (the main
content as Markdown, navigation and boilerplate dropped), PDF through pypdf (one part per
page), DOCX through python-docx (heading styles become Markdown headings). Those three need
the ``knowledge`` extra; a missing library is a clear error naming it.

The files are outside documents: every parser runs under :class:`ConversionLimits` (bytes on
disk, bytes inflated from a DOCX's ZIP, pages, characters of text, and seconds, checked
between pages and paragraphs; a knowledge base reads each file in a child process killed at
``max_seconds``, :mod:`runner.knowledge.parse_process`), and anything a parser raises on a damaged file becomes a
:class:`ConversionError` naming it, so one bad file never stops the others being indexed.
A PDF that yields no text at all (scanned images, no fonts) is an error too, not an empty
entry in the index.
"""

from __future__ import annotations

import importlib
import io
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner.errors import ConfigError
from runner.knowledge.bounded_zip import ZipLimitError, ZipUnreadable, bounded_copy
from runner.knowledge.limits import DEFAULT_LIMITS, ConversionLimits

TEXT_SUFFIXES = frozenset({".md", ".markdown", ".txt", ".text", ".rst"})
SUPPORTED_SUFFIXES = TEXT_SUFFIXES | {".html", ".htm", ".pdf", ".docx"}
INSTALL_HINT = "pip install 'runner[knowledge]'"
MAX_SOURCE_BYTES = 50_000_000


class ConversionError(Exception):
    """A source file that cannot be read as a document (named in the message)."""


class _Meter:
    """Counts pages and characters against the limits and watches the clock."""

    def __init__(self, name: str, limits: ConversionLimits):
        self.name, self.limits = name, limits
        self.chars, self.items = 0, 0
        self.started = time.monotonic()

    def add(self, text: str) -> str:
        self.chars += len(text)
        self.items += 1
        if self.chars > self.limits.max_chars:
            raise ConversionError(f"{self.name} holds more than {self.limits.max_chars:,} characters of text; split it")
        if time.monotonic() - self.started > self.limits.max_seconds:
            raise ConversionError(f"{self.name} took longer than {self.limits.max_seconds:g} s to read; split or simplify it")
        return text


@dataclass(frozen=True)
class Part:
    """Converted text of a file, or of one page of it (``page`` from 1). ``lines_are_source``:
    line numbers in ``text`` are the file's own (Markdown, text), so citations can give them."""

    text: str
    page: int | None = None
    lines_are_source: bool = False


def convert(path: Path, limits: ConversionLimits = DEFAULT_LIMITS) -> list[Part]:
    """The parts of one source file, by its suffix."""
    suffix = path.suffix.lower()
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise ConversionError(f"{path.name} cannot be read ({exc.strerror or exc})") from None
    if size > MAX_SOURCE_BYTES:
        raise ConversionError(f"{path.name} is larger than {MAX_SOURCE_BYTES // 1_000_000} MB")
    meter = _Meter(path.name, limits)
    if suffix in TEXT_SUFFIXES:
        return [Part(meter.add(_utf8(path)), lines_are_source=True)]
    if suffix in (".html", ".htm"):
        return [Part(meter.add(_html(path)))]
    if suffix == ".pdf":
        return _pdf(path, meter)
    if suffix == ".docx":
        return [Part(_docx(path, meter))]
    raise ConversionError(f"{path.name}: unsupported file type (use {', '.join(sorted(SUPPORTED_SUFFIXES))})")


def _utf8(path: Path) -> str:
    try:
        return path.read_text("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        raise ConversionError(f"{path.name} is not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise ConversionError(f"{path.name} cannot be read ({exc.strerror or exc})") from None


def _library(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError:
        raise ConfigError(f"reading this file type needs the '{name}' package: {INSTALL_HINT}") from None


def _html(path: Path) -> str:
    trafilatura = _library("trafilatura")
    html = path.read_bytes().decode("utf-8", "replace")
    try:
        text = trafilatura.extract(html, output_format="markdown", include_formatting=True, include_links=False, favor_recall=True)
    except Exception as exc:  # lxml and trafilatura raise many types on damaged markup: name the file
        raise ConversionError(f"{path.name} is not readable HTML ({type(exc).__name__}: {exc})") from None
    return str(text or "")


def _pdf(path: Path, meter: _Meter) -> list[Part]:
    pypdf = _library("pypdf")
    try:
        reader = pypdf.PdfReader(str(path))
        if reader.is_encrypted and not reader.decrypt("").value:  # PasswordType.NOT_DECRYPTED is 0
            raise ConversionError(f"{path.name} is encrypted with a password; give an unencrypted copy")
        pages = len(reader.pages)
        if pages > meter.limits.max_pages:
            raise ConversionError(f"{path.name} has {pages} pages, more than {meter.limits.max_pages}; split it")
        parts = [Part(meter.add(page.extract_text() or ""), page=number) for number, page in enumerate(reader.pages, 1)]
    except ConversionError:
        raise
    except pypdf.errors.DependencyError:  # AES without the cryptography package
        raise ConversionError(f"{path.name} is AES-encrypted: reading it needs the 'cryptography' package ({INSTALL_HINT})") from None
    except Exception as exc:  # pypdf raises far more than PyPdfError on damaged files (ValueError, AttributeError, RecursionError...)
        raise ConversionError(f"{path.name} is not a readable PDF ({type(exc).__name__}: {_short(exc)})") from None
    if not any(part.text.strip() for part in parts):
        raise ConversionError(
            f"{path.name} has no extractable text in {len(parts)} page(s) (scanned images, or text without fonts); "
            "give a text version or an OCR'd PDF"
        )
    return parts


def _docx(path: Path, meter: _Meter) -> str:
    docx = _library("docx")
    try:
        document = docx.Document(io.BytesIO(bounded_copy(path, meter.limits.zip)))
    except ZipUnreadable as exc:
        raise ConversionError(f"{path.name} is not a readable DOCX (not a ZIP container: {exc})") from None
    except ZipLimitError as exc:
        raise ConversionError(f"{path.name} {exc}") from None
    except Exception as exc:  # python-docx raises zipfile/KeyError/ValueError for damaged files: name the file
        raise ConversionError(f"{path.name} is not a readable DOCX ({type(exc).__name__})") from None
    lines: list[str] = []
    try:
        for paragraph in document.paragraphs:
            text = meter.add(paragraph.text.strip())
            if not text:
                continue
            style = (paragraph.style.name or "") if paragraph.style is not None else ""
            level = _heading_level(style)
            lines.append(f"{'#' * level} {text}" if level else text)
            lines.append("")
    except ConversionError:
        raise
    except Exception as exc:  # a damaged style or paragraph part, found only while reading it
        raise ConversionError(f"{path.name} is not a readable DOCX ({type(exc).__name__})") from None
    return "\n".join(lines)


def _short(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:200] + ("..." if len(text) > 200 else "")


def _heading_level(style: str) -> int:
    """``Heading 2`` -> 2, ``Title`` -> 1, anything else -> 0."""
    if style == "Title":
        return 1
    if style.startswith("Heading "):
        tail = style.removeprefix("Heading ").strip()
        return min(int(tail), 6) if tail.isdigit() else 0
    return 0
