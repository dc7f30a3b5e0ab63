"""OpenAI's BPE encodings, shipped with the runner so exact token counts need no network.

``tiktoken`` downloads its encoding files on first use, which fails on a machine with no
internet. The two files OpenAI's chat models use ship here instead, gzipped, as package
data (``o200k_base``: gpt-4o, gpt-4.1, gpt-5, o1/o3/o4; ``cl100k_base``: gpt-4,
gpt-3.5). Loading checks each file's SHA-256 against the hash tiktoken itself pins for
the file it would download, then builds a ``tiktoken.Encoding`` from it directly, so
tiktoken's downloader and cache are never touched.

``tiktoken`` is imported only when an encoding is first loaded (a money or token cap
needs an estimate for an OpenAI model): about 0.3 s once per process, half of it tiktoken building
its ``Encoding``.
"""

from __future__ import annotations

import binascii
import hashlib
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from runner.errors import RunnerError

_O200K_PATTERN = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)
_CL100K_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)


@dataclass(frozen=True)
class EncodingFile:
    """One shipped encoding: its file, the SHA-256 of the uncompressed ranks, and the
    constructor arguments tiktoken uses for it (``tiktoken_ext.openai_public``)."""

    name: str
    sha256: str
    pattern: str
    special_tokens: tuple[tuple[str, int], ...]

    @property
    def filename(self) -> str:
        return f"{self.name}.tiktoken.gz"


ENCODINGS = {
    "o200k_base": EncodingFile(
        "o200k_base",
        "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
        _O200K_PATTERN,
        (("<|endoftext|>", 199999), ("<|endofprompt|>", 200018)),
    ),
    "cl100k_base": EncodingFile(
        "cl100k_base",
        "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
        _CL100K_PATTERN,
        (
            ("<|endoftext|>", 100257),
            ("<|fim_prefix|>", 100258),
            ("<|fim_middle|>", 100259),
            ("<|fim_suffix|>", 100260),
            ("<|endofprompt|>", 100276),
        ),
    ),
}


class EncodingDataError(RunnerError):
    """A shipped encoding file is missing or does not match its pinned hash (a broken install)."""


def read_ranks(name: str) -> dict[bytes, int]:
    """The verified mergeable ranks of the shipped encoding ``name`` (token bytes -> rank)."""
    import gzip  # only when an encoding is loaded

    spec = ENCODINGS[name]
    try:
        packed = resources.files(__name__).joinpath(spec.filename).read_bytes()
        data = gzip.decompress(packed)
    except (OSError, EOFError) as exc:
        raise EncodingDataError(f"cannot read the shipped encoding {spec.filename}: {exc}; reinstall runner") from None
    if hashlib.sha256(data).hexdigest() != spec.sha256:
        raise EncodingDataError(f"the shipped encoding {spec.filename} does not match its SHA-256; reinstall runner")
    fields = data.split()  # "<base64 token> <rank>" per line; the hash above vouches for the layout
    return dict(zip(map(binascii.a2b_base64, fields[0::2]), map(int, fields[1::2]), strict=True))  # twice a loop's speed


@cache
def load_encoding(name: str) -> Any:
    """The ``tiktoken.Encoding`` ``name`` (one of :data:`ENCODINGS`), built from the shipped
    file, once per process. Raises ``ImportError`` without tiktoken, ``KeyError`` for
    another name and :class:`EncodingDataError` for a damaged file."""
    spec = ENCODINGS[name]
    import tiktoken  # imported here: only runs with a cap on an OpenAI model pay for it

    return tiktoken.Encoding(
        name, pat_str=spec.pattern, mergeable_ranks=read_ranks(name), special_tokens=dict(spec.special_tokens)
    )
