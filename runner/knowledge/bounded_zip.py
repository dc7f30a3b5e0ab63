"""A ZIP container (DOCX) read under limits counted while inflating, not from its headers.

A DOCX of 0.2 MB can declare small members and inflate to gigabytes; a parser handed the
file would read it all. :func:`bounded_copy` reads the members itself, counting the bytes
actually inflated and the members, and returns an in-memory copy for the parser: the XML
parts as they are, every other member (images, fonts, embedded objects: nothing text
comes from) empty, so it neither counts against the limit nor reaches the parser.
"""

from __future__ import annotations

import io
import zipfile
import zlib
from pathlib import Path

from runner.knowledge.limits import ZipLimits

READ_CHUNK = 64 * 1024
TEXT_MEMBER_SUFFIXES = (".xml", ".rels")


class ZipLimitError(Exception):
    """The container passes a limit or cannot be read (the message says which)."""


class ZipUnreadable(ZipLimitError):
    """The file is not a ZIP container, or a member cannot be inflated."""


def bounded_copy(path: Path, limits: ZipLimits) -> bytes:
    """The ZIP at ``path`` rewritten in memory under ``limits`` (non-XML members emptied)."""
    try:
        with zipfile.ZipFile(path) as archive:
            members = archive.infolist()
            if len(members) > limits.max_members:
                raise ZipLimitError(f"holds {len(members)} members, more than {limits.max_members}")
            out = io.BytesIO()
            budget = limits.max_inflated_bytes
            with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as copy:
                for member in members:
                    data = b""
                    if member.filename.lower().endswith(TEXT_MEMBER_SUFFIXES):
                        data = _read(archive, member, budget, limits)
                        budget -= len(data)
                    copy.writestr(member.filename, data)
            return out.getvalue()
    except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError, RuntimeError, ValueError, OSError) as exc:
        raise ZipUnreadable(f"{type(exc).__name__}: {exc}") from None


def _read(archive: zipfile.ZipFile, member: zipfile.ZipInfo, budget: int, limits: ZipLimits) -> bytes:
    """``member`` inflated, stopping as soon as it passes what is left of the budget."""
    pieces: list[bytes] = []
    size = 0
    with archive.open(member) as stream:
        while chunk := stream.read(READ_CHUNK):
            size += len(chunk)
            if size > budget:
                raise ZipLimitError(
                    f"inflates to more than {limits.max_inflated_bytes / 1_000_000:g} MB of text "
                    f"(at member {member.filename}); a real document is far smaller"
                )
            pieces.append(chunk)
    return b"".join(pieces)
