"""Texts of each kind a prompt carries, and a reference OpenAI tokenizer built by tiktoken itself.

The reference is ``tiktoken.get_encoding(name)`` loading through tiktoken's own cache (a
directory filled with the runner's shipped files, which tiktoken checks against its own
pinned hashes): an independent check on how the runner builds its encodings.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import random
from importlib import resources
from pathlib import Path
from typing import Any

TIKTOKEN_URLS = {
    "o200k_base": "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken",
    "cl100k_base": "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken",
}


def _csv(rows: int, rnd: random.Random) -> str:
    lines = ["id,date,region,units,price,revenue"]
    for i in range(rows):
        units, price = rnd.randint(1, 99), rnd.randint(100, 99999) / 100
        lines.append(f"{i},2026-11-{rnd.randint(1, 30):02d},{rnd.choice('NESW')},{units},{price:.2f},{units * price:.2f}")
    return "\n".join(lines)


def samples() -> dict[str, str]:
    """About 3,000 characters of each kind."""
    rnd = random.Random(12)
    digits = "".join(rnd.choice("0123456789") for _ in range(3000))
    return {
        "english": (
            "The quarterly report shows steady growth in every region, although the northern stores "
            "lagged behind their targets for the second month in a row. "
        ) * 20,
        "digits": digits,
        "single_digit_csv": ",".join(digits[:1500]),
        "csv": _csv(90, rnd),
        "json": json.dumps([{"id": i, "ok": i % 2 == 0, "v": [i, i * 1.5, None]} for i in range(120)]),
        "cjk": "東京都の人口は約千四百万人で、日本の首都である。北京是中国的首都。서울은 한국의 수도입니다。" * 30,
        "emoji": "😀👍🏽🇫🇷👨‍👩‍👧‍👦🧪✅🔥 " * 150,
        "code": (
            "def total(rows: list[dict]) -> float:\n    return sum(r['units'] * r['price'] for r in rows if r)\n\n"
            "for (int i = 0; i < n; ++i) { acc += a[i] << 2; }\n"
        ) * 20,
        "whitespace": "\n\n\t   x  \r\n" * 200 + " " * 500,
        "special_tokens": "<|endoftext|><|im_start|>system\n<|im_end|><|endofprompt|>[INST]<<SYS>>" * 30,
        "mixed": "Ünïcödé façade — naïve coöperation; Ωμέγα; Привет; مرحبا; שלום; नमस्ते; 🙂 1,234.56 €" * 25,
    }


def random_strings(count: int, seed: int = 7) -> list[str]:
    """Short strings drawn from ASCII, CJK, emoji, Latin-1, combining marks, Arabic and whitespace."""
    rnd = random.Random(seed)
    pools = [range(32, 127), range(0x4E00, 0x4F00), range(0x1F600, 0x1F650), range(0xA0, 0x250),
             range(0x300, 0x370), range(0x600, 0x680), [9, 10, 13, 32]]  # fmt: skip
    return ["".join(chr(rnd.choice(rnd.choice(pools))) for _ in range(rnd.randint(1, 120))) for _ in range(count)]


def fill_tiktoken_cache(directory: Path) -> Path:
    """Put the shipped files where tiktoken's cache looks (``TIKTOKEN_CACHE_DIR``)."""
    package = resources.files("runner.model.encodings")
    for name, url in TIKTOKEN_URLS.items():
        data = gzip.decompress(package.joinpath(f"{name}.tiktoken.gz").read_bytes())
        (directory / hashlib.sha1(url.encode()).hexdigest()).write_bytes(data)
    return directory


def reference_encodings(cache_dir: Path) -> dict[str, Any]:
    """``tiktoken.get_encoding`` for both encodings, loaded from ``cache_dir`` only."""
    import pytest
    import tiktoken

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TIKTOKEN_CACHE_DIR", str(cache_dir))
        patch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")  # a download would fail, not hang
        patch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
        return {name: tiktoken.get_encoding(name) for name in TIKTOKEN_URLS}
