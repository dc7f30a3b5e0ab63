"""Known secrets in artifacts: redacted from text, a binary holding one is withheld."""

from __future__ import annotations

import base64
import gzip
import io
import random
import struct
import zipfile
import zlib

import pytest

from runner.reports.screen import MAX_EXPANDED_BYTES, SecretFound, screen_artifact

KEY = "sk-screen-key-0123456789abcdef"


def withheld(content: bytes, secrets: tuple[str, ...] = (KEY,)) -> str:
    with pytest.raises(SecretFound) as found:
        screen_artifact(content, secrets)
    assert KEY not in str(found.value)
    return str(found.value)


def png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def test_text_is_redacted_and_counted() -> None:
    screened = screen_artifact(f"a {KEY} b {KEY}\n".encode(), [KEY])
    assert screened.content == b"a [REDACTED] b [REDACTED]\n" and screened.redactions == 2


def test_the_longer_of_two_overlapping_secrets_is_redacted_whole() -> None:
    short = KEY[:12]
    screened = screen_artifact(f"{KEY} {short}".encode(), [short, KEY])
    assert screened.content == b"[REDACTED] [REDACTED]"


def test_nothing_changes_without_secrets_or_matches() -> None:
    text = b"ordinary text with sk-looking-but-unknown-token\n"
    assert screen_artifact(text, []).content == text
    assert screen_artifact(text, [KEY]).content == text
    assert screen_artifact(text, ["abc"]).content == text  # too short to be a secret


@pytest.mark.parametrize("offset", [0, 1, 2])
@pytest.mark.parametrize("encode", [base64.b64encode, base64.urlsafe_b64encode])
def test_base64_in_text_is_withheld_at_every_alignment(offset: int, encode: object) -> None:
    encoded = encode(b"x" * offset + KEY.encode() + b"tail")  # type: ignore[operator]
    assert "base64-encoded" in withheld(b"token=" + encoded)


def test_a_key_behind_json_escapes_in_text_is_withheld() -> None:
    escaped = "".join(f"\\u{ord(c):04x}" if i % 3 == 0 else c for i, c in enumerate(KEY))
    assert "behind JSON \\u escapes" in withheld(('{"token": "' + escaped + '"}').encode())
    ordinary = b'{"name": "caf\\u00e9"}'
    assert screen_artifact(ordinary, [KEY]).content == ordinary


def test_hex_in_text_is_withheld() -> None:
    assert "hex-encoded" in withheld(KEY.encode().hex().upper().encode())


@pytest.mark.parametrize("codec", ["utf-16-le", "utf-16-be", "utf-32-le", "utf-32-be"])
def test_wide_encodings_in_a_binary_are_withheld(codec: str) -> None:
    assert codec.upper() in withheld(b"\x00\xff" + KEY.encode(codec))


def test_verbatim_in_a_binary_is_withheld() -> None:
    assert "verbatim, in the file" in withheld(b"\x00\x01" + KEY.encode() + b"\xff")


def test_invalid_utf8_with_the_key_is_binary_and_withheld() -> None:
    withheld(b"\xff\xfe" + KEY.encode())


def test_gzip_and_zlib_streams_anywhere_are_inflated() -> None:
    assert "compressed stream" in withheld(b"junk\x00" + gzip.compress(KEY.encode() * 2) + b"tail")
    pdf = b"%PDF-1.7\n4 0 obj<</Filter/FlateDecode>>stream\n" + zlib.compress(b"BT (" + KEY.encode() + b") Tj ET")
    assert "compressed stream" in withheld(pdf + b"\nendstream\nendobj\n%%EOF")


def test_a_truncated_stream_still_counts() -> None:
    stream = zlib.compress(KEY.encode() + bytes(random.Random(1).randbytes(4000)))
    withheld(b"\x00" + stream[: len(stream) // 2])


def test_zip_members_nested_zips_and_xlsx() -> None:
    inner = io.BytesIO()
    with zipfile.ZipFile(inner, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("xl/sharedStrings.xml", f"<si><t>{KEY}</t></si>")
    outer = io.BytesIO()
    with zipfile.ZipFile(outer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("book.xlsx", inner.getvalue())
    reason = withheld(outer.getvalue())
    assert "inside zip member 'xl/sharedStrings.xml'" in reason and "inside zip member 'book.xlsx'" in reason


def test_png_text_chunks_and_image_data_split_over_idat_chunks() -> None:
    head = b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 0, 0, 0, 0))
    ztxt = png_chunk(b"zTXt", b"Comment\x00\x00" + zlib.compress(KEY.encode()))
    withheld(head + ztxt + png_chunk(b"IEND", b""))
    data = zlib.compress(b"\x00" * 100 + KEY.encode())
    idats = png_chunk(b"IDAT", data[:10]) + png_chunk(b"IDAT", data[10:])
    assert "PNG image data" in withheld(head + idats + png_chunk(b"IEND", b""))


def test_unreadable_or_oversized_containers_fail_closed() -> None:
    encrypted = io.BytesIO()
    with zipfile.ZipFile(encrypted, "w") as archive:
        archive.writestr("a.txt", "hello")
    raw = bytearray(encrypted.getvalue())
    for signature in (b"PK\x03\x04", b"PK\x01\x02"):  # set the 'encrypted' flag in both headers
        at = raw.find(signature)
        flag_at = at + (6 if signature == b"PK\x03\x04" else 8)
        raw[flag_at] |= 1
    assert "encrypted zip member" in withheld(bytes(raw))
    bomb = gzip.compress(b"\x00" * (MAX_EXPANDED_BYTES + 1024))
    assert "could not be checked" in withheld(b"\x00" + bomb)


def test_clean_binaries_pass_unchanged() -> None:
    noise = random.Random(7).randbytes(2 * 1024 * 1024)
    assert screen_artifact(noise, [KEY]).content == noise
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as book:
        book.writestr("xl/sharedStrings.xml", "<t>nothing to see</t>")
    assert screen_artifact(archive.getvalue(), [KEY]).redactions == 0
