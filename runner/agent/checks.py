"""Checks on a final answer beyond its JSON Schema.

``numbers_from_prompt``: every number and date in the answer must come from the prompt (the
goal and the tool results the agent saw). A number may be a rounding of one given
(``4247.3`` -> ``4,247`` is fine); small integers (0-10) are ignored since prose uses them
freely. It catches the commonest failure of small models writing from figures: invented
or altered numbers.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

DATE = re.compile(r"\b\d{4}-\d{2}-\d{2}\b")
NUMBER = re.compile(r"(?<![\w.])[-+]?\d[\d,]*(?:\.\d+)?")


def _numbers(text: str) -> list[tuple[float, int]]:
    """(value, decimals) of every number in ``text`` outside ISO dates."""
    found = []
    for match in NUMBER.finditer(DATE.sub(" ", text)):
        raw = match.group().replace(",", "").lstrip("+")
        try:
            value = float(raw)
        except ValueError:
            continue
        decimals = len(raw.split(".", 1)[1]) if "." in raw else 0
        found.append((value, decimals))
    return found


def ungrounded_numbers(answer: str, sources: Iterable[str]) -> list[str]:
    """Numbers and dates in ``answer`` that no source contains (even rounded)."""
    source_text = "\n".join(sources)
    known = [value for value, _ in _numbers(source_text)]
    known_dates = set(DATE.findall(source_text))
    problems = [d for d in DATE.findall(answer) if d not in known_dates]
    for value, decimals in _numbers(answer):
        if value.is_integer() and 0 <= value <= 10:
            continue
        if not any(round(k, decimals) == value or round(abs(k), decimals) == abs(value) for k in known):
            problems.append(f"{value:.{decimals}f}")
    return list(dict.fromkeys(problems))


FIGURE_LINE = re.compile(r"^\s*-\s+[^:\n]+:\s*(.+)$", re.MULTILINE)
FALLBACK_NOTE = "The model's summary did not match the figures, so the figures are listed as given:"


def figure_lines(goal: str) -> list[str]:
    """The ``- label: value`` lines of a goal."""
    return [m.group(0).strip() for m in FIGURE_LINE.finditer(goal)]


def missing_figures(answer: str, goal: str) -> list[str]:
    """Figures (numbers of the goal's ``- label: value`` lines) the answer lacks or reorders."""
    wanted = [(value, decimals) for line in figure_lines(goal) for value, decimals in _numbers(line.split(":", 1)[1])]
    wanted = [(v, d) for v, d in wanted if not (v.is_integer() and 0 <= v <= 10)]
    given = [value for value, _ in _numbers(answer)]
    missing, position = [], 0
    for value, decimals in wanted:
        for i in range(position, len(given)):
            if round(given[i], decimals) == round(value, decimals) or round(abs(given[i]), decimals) == round(abs(value), decimals):
                position = i + 1
                break
        else:
            missing.append(f"{value:.{decimals}f}")
    return missing


def figures_fallback(goal: str) -> str:
    """A plain rendering of the goal's figures, for when a model's text is rejected."""
    lines = figure_lines(goal)
    return FALLBACK_NOTE + "\n" + "\n".join(lines) if lines else FALLBACK_NOTE


NUMBERS_TURN = (
    "Your answer contains numbers that are not in the figures you were given: {numbers}. "
    "Write the answer again using only the figures given, exactly as written."
)
ORDER_TURN = (
    "Your answer is missing figures or gives them out of order: {numbers}. Use every figure, "
    "exactly as written, in the order given, one sentence each."
)


@dataclass(frozen=True)
class Rejection:
    """Why an answer was refused: what the model is told, and what the run reports if
    repairs run out."""

    request: str
    error: str
    kind: str  # output_schema | ungrounded


def grounding_rejection(
    answer: str, goal: str, tool_outputs: Iterable[str], *, numbers_from_prompt: bool, figures_in_order: bool
) -> Rejection | None:
    """The first grounding check ``answer`` fails, or ``None``."""
    if numbers_from_prompt:
        invented = ungrounded_numbers(answer, [goal, *tool_outputs])
        if invented:
            listed = ", ".join(invented)
            return Rejection(NUMBERS_TURN.format(numbers=listed), f"numbers not in the prompt: {listed}", "ungrounded")
    if figures_in_order:
        missing = missing_figures(answer, goal)
        if missing:
            listed = ", ".join(missing)
            return Rejection(ORDER_TURN.format(numbers=listed), f"figures missing or out of order: {listed}", "ungrounded")
    return None
