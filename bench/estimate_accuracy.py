"""How close the prompt estimate that caps reserve is to the real count, per kind of content.

For each kind of text (about 3,000 characters in a user message, after a short system
prompt) prints estimate / real prompt tokens:

* ``openai``: a gpt-4o-mini request; real = OpenAI's tokenizer (o200k_base) plus OpenAI's
  documented chat framing, which is what the estimate computes, so 1.00 is the check;
* ``unknown/smollm2``: a model the runner has no tokenizer for, estimated by the UTF-8 byte
  bound; real = SmolLM2-135M's own chat template and llama.cpp tokenizer (a real
  non-OpenAI tokenizer that spells digits one by one; needs ``runner[local]``);
* ``unknown/o200k``: the same bound against a model whose tokenizer happens to be o200k;
* ``unknown/bytes``: the same bound against the worst honest tokenizer, one token per byte.

Every ratio is >= 1.00 (the estimate never errs low); how far above 1 says how much
budget a reservation holds back. ::

    .venv/bin/python bench/estimate_accuracy.py
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from runner.model.base import Message, ModelRequest
from runner.model.replies import usage_counter
from runner.model.tokens import estimate_prompt_tokens
from runner.model.wire import request_body

SYSTEM = "You are a careful analyst. Answer briefly."


def texts() -> dict[str, str]:
    rnd = random.Random(4)
    csv_rows = ["id,date,region,units,price"] + [
        f"{i},2026-11-{rnd.randint(1, 30):02d},{rnd.choice('NESW')},{rnd.randint(1, 99)},{rnd.randint(100, 99999) / 100:.2f}"
        for i in range(110)
    ]
    return {
        "English": ("The northern stores lagged behind their targets for the second month in a row, while "
                    "online orders grew faster than any region. ") * 25,
        "digits/CSV": "\n".join(csv_rows),
        "single digits": ",".join(rnd.choice("0123456789") for _ in range(1500)),
        "CJK": "東京都の人口は約千四百万人で、日本の首都である。北京是中国的首都。" * 45,
        "emoji": "😀👍🏽🇫🇷🧪✅🔥 " * 220,
        "code": ("def total(rows: list[dict]) -> float:\n"
                 "    return sum(r['units'] * r['price'] for r in rows if r)\n\n") * 30,
    }


def smollm2_counter() -> Callable[[ModelRequest], int] | None:
    """Real prompt tokens for SmolLM2 (its GGUF chat template + llama.cpp), or None."""
    from runner.model import local

    if not local.local_model_available():
        return None
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    llama = local._import_llama().Llama(model_path=str(local.find_gguf()), vocab_only=True, verbose=False)
    template = ImmutableSandboxedEnvironment().from_string(llama.metadata["tokenizer.chat_template"])

    def count(request: ModelRequest) -> int:
        turns = [{"role": r, "content": t} for r, t in local.flatten_messages(request.messages)]
        prompt = template.render(messages=turns, add_generation_prompt=True)
        return len(llama.tokenize(prompt.encode("utf-8"), add_bos=True, special=True))

    return count


def request(model: str, text: str) -> ModelRequest:
    return ModelRequest(model=model, messages=(Message("system", SYSTEM), Message("user", text)))


def ratios(text: str, smollm2: Callable[[ModelRequest], int] | None) -> dict[str, float | None]:
    openai, unknown = request("gpt-4o-mini", text), request("my-model", text)
    bound = estimate_prompt_tokens(unknown)
    body: dict[str, Any] = request_body(unknown)
    return {
        "openai": estimate_prompt_tokens(openai) / usage_counter("o200k_base", "").prompt_tokens(request_body(openai)),
        "unknown/smollm2": bound / smollm2(unknown) if smollm2 else None,
        "unknown/o200k": bound / usage_counter("o200k_base", "").prompt_tokens(body),
        "unknown/bytes": bound / usage_counter("utf8_bytes", "").prompt_tokens(body),
    }


def main() -> None:
    smollm2 = smollm2_counter()
    columns = ["openai", "unknown/smollm2", "unknown/o200k", "unknown/bytes"]
    print(f"{'content':<15}" + "".join(f"{c:>17}" for c in columns))
    worst: dict[str, float] = {}
    for kind, text in texts().items():
        row = ratios(text, smollm2)
        print(f"{kind:<15}" + "".join(f"{row[c]:>17.2f}" if row[c] is not None else f"{'n/a':>17}" for c in columns))
        for column, value in row.items():
            if value is not None:
                worst[column] = min(worst.get(column, value), value)
    print("lowest ratio per column (must be >= 1.00): " + ", ".join(f"{c} {v:.2f}" for c, v in worst.items()))
    if smollm2 is None:
        print("unknown/smollm2: n/a (install runner[local] for the embedded model's tokenizer)")


if __name__ == "__main__":
    main()
