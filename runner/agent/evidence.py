"""Evidence for an answer: its numbers and names must appear in what the run found.

A claim is a number or date (as :func:`runner.agent.checks.ungrounded_numbers` reads them:
roundings of a source figure are fine, small integers are ignored) or a *name*: a
capitalised word or an acronym (``Atlantis``, ``Q3``, ``EMEA``). A name is supported when a
source contains it as a whole word, in any case. Words that only start a sentence
(``The``, ``However``) are not names unless the sources are silent about them and they are
not common English. No model is involved: the check is cheap, deterministic and errs
towards asking, since a repair turn names exactly which claims lacked evidence.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

WORD = re.compile(r"[^\W_][\w'’\-]*", re.UNICODE)
_LINE_MARKERS = re.compile(r"^\s*(?:[#>*\-+]+|\d+[.)])?\s*(?:\*\*|__)?")
_SENTENCE_END = re.compile(r"(?<=[.!?:;])\s+")

_COMMON_STARTER_TEXT = """
    a about above according across actually after afterwards again against all also although always among an and
    another any anyway apart are around as at based be because before being below besides best both briefly but by
    can clearly compared consequently could currently despite did do does due during each either else especially
    even eventually every finally first firstly for from further furthermore generally given going had has have
    having he her here hers herself him himself his how however i if importantly in including indeed instead into
    is it its itself just last lastly later let like likewise looking many meanwhile more moreover most mostly much
    my namely nearly neither nevertheless next no nonetheless nor not note notably nothing now of often on once one
    only or other otherwise our ours out over overall perhaps please possibly previously rather really recently
    regarding second secondly see several she should similarly since so some specifically still such summary than
    thanks that the their theirs them then there therefore these they third this those though thus to today
    together too top total unfortunately unlike until up upon us usually very was we well were what whatever when
    where whereas whether which while who whom whose why will with within without would yes yet you your yours
    answer answers conclusion result results source sources step steps yesterday tomorrow here's it's that's
    there's i'm i've we're we've done noted ok okay sure great good sorry hello hi dear thank regards kind certainly
    absolutely correct incorrect true false unknown none n/a yours sincerely cheers
"""
COMMON_STARTERS = frozenset(_COMMON_STARTER_TEXT.split())
"""Words that start sentences of any answer; capitalised there only by position."""
ALWAYS_COMMON = frozenset({"i", "i'm", "i've", "i'll", "i'd", "i’m", "i’ve", "i’ll", "i’d", "ok"})
"""Words written with a capital anywhere in a sentence that name nothing."""


@dataclass(frozen=True)
class Evidence:
    """What an answer may draw on: the text of every source, searched in lower case."""

    text: str

    @classmethod
    def of(cls, sources: Iterable[str]) -> Evidence:
        return cls("\n".join(sources).lower())

    def mentions(self, word: str) -> bool:
        """Whether ``word`` appears as a whole word (case-insensitive; ``_`` separates words,
        so the column ``revenue_sum`` mentions ``Revenue``)."""
        pattern = r"(?<![^\W_])" + re.escape(word.lower()) + r"(?![^\W_])"
        return re.search(pattern, self.text) is not None


def unsupported_names(answer: str, evidence: Evidence, ignore: Iterable[str] = ()) -> list[str]:
    """Capitalised words and acronyms of ``answer`` that no source mentions, in order."""
    ignored = {word.lower() for word in ignore}
    missing: list[str] = []
    for word, first in _capitalised_words(answer):
        name = _base_form(word)
        lowered = name.lower()
        if lowered in ignored or lowered in ALWAYS_COMMON or evidence.mentions(name) or (first and lowered in COMMON_STARTERS):
            continue
        if "-" in name and all(evidence.mentions(part) for part in name.split("-") if part):
            continue
        missing.append(name)
    return list(dict.fromkeys(missing))


def _capitalised_words(text: str) -> list[tuple[str, bool]]:
    """``(word, starts_a_sentence)`` for each word with a capital letter."""
    found: list[tuple[str, bool]] = []
    for line in text.splitlines():
        line = _LINE_MARKERS.sub("", line, count=1)
        for sentence in _SENTENCE_END.split(line):
            for index, match in enumerate(WORD.finditer(sentence)):
                word = match.group()
                if any(c.isupper() for c in word) and not word.isdigit():
                    found.append((word, index == 0))
    return found


def _base_form(word: str) -> str:
    """``Poland's`` -> ``Poland``; trailing hyphens and apostrophes dropped."""
    for suffix in ("'s", "’s"):
        if word.endswith(suffix):
            word = word[: -len(suffix)]
    return word.strip("'’-")
