"""Text that only repeats what was sent: a tool echoing its call's arguments, a model echoing
the framework's own request. Neither is evidence nor an answer.

* :func:`without_echo`: a tool result with every argument value of its call removed. "Nothing
  matches "Atlantis 4242"" holds no evidence that Atlantis exists or that 4242 is a figure:
  those words came from the model. What the tool found beyond its arguments stays.
* :func:`echoed_prompt`: the sentence of a repair request (or any prompt the framework sent
  after the goal) that an answer repeats, if any.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from typing import Any

from runner import untrusted_json

MIN_ECHO_WORDS = 5
"""A shorter sentence of a prompt may be said in an answer by chance."""
_SENTENCE = re.compile(r"(?<=[.!?:;])\s+|\n+")
_WORD = re.compile(r"[^\W_]+", re.UNICODE)


def argument_values(arguments: str) -> list[str]:
    """Every leaf value (text, number) of a call's JSON arguments, as text, longest first;
    the whole text when it is not JSON (the model's raw arguments, echoed in an error)."""
    try:
        parsed = untrusted_json.loads(arguments) if arguments.strip() else None
    except (ValueError, untrusted_json.JsonTooDeep):
        return [arguments.strip()] if arguments.strip() else []
    values = {text.strip() for text in _leaves(parsed) if text.strip()}
    return sorted(values, key=len, reverse=True)


def _leaves(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        for item in value.values():
            yield from _leaves(item)
    elif isinstance(value, list):
        for item in value:
            yield from _leaves(item)
    elif isinstance(value, str):
        yield value
    elif isinstance(value, bool) or value is None:
        return
    elif isinstance(value, int | float):
        yield json.dumps(value)


def without_echo(output: str, arguments: str) -> str:
    """``output`` with each argument value of its call removed wherever it appears whole
    (case-insensitive, as a whole word where it starts or ends with one)."""
    for value in argument_values(arguments):
        start = r"(?<![^\W_])" if _WORD.match(value[0]) else ""
        end = r"(?![^\W_])" if _WORD.match(value[-1]) else ""
        output = re.sub(start + re.escape(value) + end, " ", output, flags=re.IGNORECASE)
    return output


def _normalised(text: str) -> str:
    return " ".join(_WORD.findall(text.lower()))


def echoed_prompt(answer: str, prompts_sent: Iterable[str]) -> str | None:
    """The first sentence of ``MIN_ECHO_WORDS`` words or more of a sent prompt that
    ``answer`` contains (case, punctuation and spacing aside), else ``None``."""
    said = f" {_normalised(answer)} "
    for prompt in prompts_sent:
        for sentence in _SENTENCE.split(prompt):
            words = _normalised(sentence)
            if len(words.split()) >= MIN_ECHO_WORDS and f" {words} " in said:
                return sentence.strip()
    return None
