"""Keeping known secrets out of artifact copies.

A model or a tool can write an API key into a workspace file; the report must not carry it
on. Text (valid UTF-8 without NUL bytes) has every known secret replaced by ``[REDACTED]``.
A binary file is withheld when it holds a secret in any form we can see: as bytes, UTF-16
or UTF-32, hex or base64, or inside what the file decompresses to (zip members, as in
.xlsx and .docx; gzip and zlib streams, as in PDF and PNG). Text that still holds a secret
in an encoded form after redaction is withheld too. When the file cannot be checked
completely (encrypted zip members, too much to decompress), it is withheld: this fails
closed. Only exact known values are looked for, so ordinary content is never altered.
"""

from __future__ import annotations

import io
import re
import zipfile
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from runner.redact import MIN_ENCODED_LENGTH as _MIN_ENCODED_LENGTH
from runner.redact import decode_escapes, encoded_forms

REDACTED = b"[REDACTED]"
MIN_SECRET_LENGTH = 4  # as runner.redact: shorter values match ordinary words
MAX_EXPANDED_BYTES = 128 * 1024 * 1024
"""Decompressed bytes examined per artifact; beyond this the artifact is withheld."""
MAX_STREAM_CANDIDATES = 20_000
"""zlib/gzip header candidates tried per artifact; beyond this the artifact is withheld."""
MAX_DEPTH = 3  # containers within containers
_STREAM_HEADER = re.compile(rb"\x78[\x01\x5e\x9c\xda]|\x1f\x8b\x08")
_PNG = b"\x89PNG\r\n\x1a\n"
_INFLATE_CHUNK = 16 * 1024  # input fed at a time: damage stops the inflating early


class SecretFound(Exception):
    """The artifact holds a secret (or cannot be checked); the message says how it was found,
    never the secret."""


@dataclass(frozen=True)
class Screened:
    """An artifact safe to copy, and how many secrets were replaced in it."""

    content: bytes
    redactions: int = 0


def screen_artifact(content: bytes, secrets: Sequence[str]) -> Screened:
    """``content`` with secrets redacted (text), or :class:`SecretFound` (binary holding one)."""
    listed = sorted({s for s in secrets if s and len(s) >= MIN_SECRET_LENGTH}, key=len, reverse=True)
    if not listed:
        return Screened(content)
    forms = [form for secret in listed for form in secret_forms(secret)]
    if _is_text(content):
        redactions = 0
        for secret in listed:
            raw = secret.encode("utf-8")
            redactions += content.count(raw)
            content = content.replace(raw, REDACTED)
        _search(content, forms, "in the text")
        if b"\\u" in content:  # a JSON file may spell the secret with escapes
            _search(decode_escapes(content.decode("utf-8")).encode("utf-8"), forms, "behind JSON \\u escapes, in the text")
        return Screened(content, redactions)
    _search(content, forms, "in the file")
    budget = _Budget()
    for where, expanded in _expansions(content, budget, depth=1):
        _search(expanded, forms, where)
    return Screened(content)


def secret_forms(secret: str) -> list[tuple[str, bytes]]:
    """``(description, bytes)`` for each way ``secret`` may be written into a file: verbatim,
    UTF-16/32, and the hex and base64 forms :func:`runner.redact.encoded_forms` gives (the
    forms every stored value is redacted in, too)."""
    raw = secret.encode("utf-8")
    forms = [("verbatim", raw)]
    forms += [
        (f"as {codec.upper()}", secret.encode(codec)) for codec in ("utf-16-le", "utf-16-be", "utf-32-le", "utf-32-be")
    ]
    forms += [(name, text.encode("ascii")) for name, text in encoded_forms(secret)]
    return [(name, form) for name, form in forms if len(form) >= min(len(raw), _MIN_ENCODED_LENGTH)]


def _is_text(content: bytes) -> bool:
    if b"\0" in content:
        return False
    try:
        content.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _search(content: bytes, forms: list[tuple[str, bytes]], where: str) -> None:
    for name, form in forms:
        if form in content:
            raise SecretFound(f"it contains a secret ({name}, {where})")


@dataclass
class _Budget:
    expanded: int = 0
    candidates: int = 0

    def take(self, size: int) -> None:
        """Count ``size`` decompressed bytes; withhold the artifact once the budget is spent."""
        self.expanded += size
        if self.expanded > MAX_EXPANDED_BYTES:
            raise SecretFound(
                f"it could not be checked for secrets (more than {MAX_EXPANDED_BYTES:,} bytes to decompress)"
            )


def _expansions(content: bytes, budget: _Budget, depth: int) -> Iterator[tuple[str, bytes]]:
    """What ``content`` decompresses to, each with where it was found (nested up to MAX_DEPTH)."""
    if depth > MAX_DEPTH:
        return
    for where, expanded in (*_zip_members(content, budget), *_png_data(content, budget), *_streams(content, budget)):
        yield where, expanded
        for inner_where, inner in _expansions(expanded, budget, depth + 1):
            yield f"{inner_where}, {where}", inner


def _zip_members(content: bytes, budget: _Budget) -> list[tuple[str, bytes]]:
    if b"PK" not in content:
        return []
    try:
        archive = zipfile.ZipFile(io.BytesIO(content))
    except (zipfile.BadZipFile, ValueError, OSError):
        return []
    members = []
    with archive:
        for info in archive.infolist():
            name = repr(info.filename[:80])
            if info.flag_bits & 0x1:
                raise SecretFound(f"it could not be checked for secrets (encrypted zip member {name})")
            budget.take(info.file_size)
            try:
                with archive.open(info) as member:
                    data = member.read(info.file_size + 1)
            except (zipfile.BadZipFile, NotImplementedError, ValueError, OSError, EOFError, zlib.error):
                raise SecretFound(f"it could not be checked for secrets (unreadable zip member {name})") from None
            if len(data) > info.file_size:
                raise SecretFound(f"it could not be checked for secrets (zip member {name} is larger than it says)")
            members.append((f"inside zip member {name}", data))
    return members


def _png_data(content: bytes, budget: _Budget) -> list[tuple[str, bytes]]:
    """A PNG's image data, joined across IDAT chunks (the zlib stream is split between them)."""
    if not content.startswith(_PNG):
        return []
    chunks, position = [], len(_PNG)
    while position + 8 <= len(content):
        length = int.from_bytes(content[position : position + 4], "big")
        if content[position + 4 : position + 8] == b"IDAT":
            chunks.append(content[position + 8 : position + 8 + length])
        position += 12 + length
    expanded, _ = _inflate(memoryview(b"".join(chunks)), zlib.MAX_WBITS, budget)
    return [("in the PNG image data", expanded)] if expanded else []


def _streams(content: bytes, budget: _Budget) -> list[tuple[str, bytes]]:
    """Every zlib or gzip stream embedded anywhere in ``content`` (PDF objects, PNG text
    chunks), including truncated or damaged ones: what inflates before the damage counts."""
    found, resume_at = [], 0
    view = memoryview(content)
    for match in _STREAM_HEADER.finditer(content):
        if match.start() < resume_at:
            continue
        budget.candidates += 1
        if budget.candidates > MAX_STREAM_CANDIDATES:
            raise SecretFound("it could not be checked for secrets (too many compressed-stream candidates)")
        wbits = 31 if match.group().startswith(b"\x1f") else zlib.MAX_WBITS
        expanded, consumed = _inflate(view[match.start() :], wbits, budget)
        if expanded:
            found.append(("in a compressed stream", expanded))
        if consumed:
            resume_at = match.start() + consumed
    return found


def _inflate(data: memoryview, wbits: int, budget: _Budget) -> tuple[bytes, int]:
    """What ``data`` inflates to up to the end of the stream or the first damage, and how
    many input bytes a complete stream used (0 when it did not end)."""
    decompressor = zlib.decompressobj(wbits)
    pieces: list[bytes] = []
    for start in range(0, len(data), _INFLATE_CHUNK):
        try:
            piece = decompressor.decompress(data[start : start + _INFLATE_CHUNK])
        except zlib.error:
            break
        budget.take(len(piece))
        pieces.append(piece)
        if decompressor.eof:
            return b"".join(pieces), min(start + _INFLATE_CHUNK, len(data)) - len(decompressor.unused_data)
    return b"".join(pieces), 0
