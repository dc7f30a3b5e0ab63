"""Text for a terminal: control characters made visible, so model or tool text cannot drive it.

Answers, tool output and error messages may hold escape sequences (``ESC]0;title BEL`` sets
the window title, ``ESC[2J`` clears the screen, OSC 52 writes the clipboard), other C0/C1
controls, and bidi overrides that make a line read differently from what it says. Everything
the human-readable output prints goes through :func:`safe_text` (multi-line text: answers,
errors) or :func:`safe_line` (one log line); each such character is shown as a visible escape
(``\\x1b``, ``\\u202e``). Lone surrogates (undecodable bytes kept by ``surrogateescape``)
become visible escapes too, so printing them cannot fail.

JSON output stays exact: :func:`json_for_terminal` only swaps the characters JSON leaves raw
(C1 controls, bidi controls, line separators, lone surrogates) for ``\\uXXXX`` escapes, which
decode to the same value.
"""

from __future__ import annotations

import io
import re
from typing import TextIO

import click

_INVISIBLE = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029\ud800-\udfff"
_UNSAFE_IN_TEXT = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{_INVISIBLE}]")
_UNSAFE_IN_LINE = re.compile(f"[\x00-\x1f\x7f-\x9f{_INVISIBLE}]")
_RAW_IN_JSON = re.compile(f"[\x7f-\x9f{_INVISIBLE}]")
_LINE_BREAKS = re.compile(r"\r\n|[\n\r\t]")


def _visible(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def safe_text(text: object) -> str:
    """``text`` with every control character but newline and tab shown as an escape (CRLF is a
    newline; a lone carriage return, which can overwrite what the line showed, is an escape)."""
    return _UNSAFE_IN_TEXT.sub(_visible, str(text).replace("\r\n", "\n"))


def safe_line(text: object) -> str:
    """``text`` for one log line: line breaks and tabs become spaces, other controls escapes."""
    return _UNSAFE_IN_LINE.sub(_visible, _LINE_BREAKS.sub(" ", str(text)))


def json_for_terminal(text: str) -> str:
    """JSON text with the characters JSON leaves raw written as ``\\uXXXX`` (same value)."""
    return _RAW_IN_JSON.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def echo_line(text: object, *, err: bool = False) -> None:
    """Print one line made safe by :func:`safe_line`."""
    click.echo(safe_line(text), err=err)


class SafeStream(io.TextIOBase):
    """A text stream whose writes go through :func:`safe_text` (for messages click prints itself)."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__()
        self._stream = stream

    def write(self, text: str) -> int:
        return self._stream.write(safe_text(text))

    def flush(self) -> None:
        self._stream.flush()

    def isatty(self) -> bool:
        return self._stream.isatty()
