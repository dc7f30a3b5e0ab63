"""checks.evidence, the unit: which numbers and names count as claims, and what supports them."""

from __future__ import annotations

import pytest

from runner.agent.checks import EvidenceCheck, Seen
from runner.agent.evidence import Evidence, unsupported_names
from runner.prompts import Prompts

TOOL_OUTPUT = "region,revenue_sum\nNorth,48210.55\nSouth-East,39001.20\nEMEA total: 87211.75 (Q3)"


def names(answer: str, *sources: str, ignore: tuple[str, ...] = ()) -> list[str]:
    return unsupported_names(answer, Evidence.of(sources or (TOOL_OUTPUT,)), ignore)


@pytest.mark.parametrize(
    "answer",
    [
        "North had the highest revenue.",
        "The north region led; South-East followed.",  # case-insensitive, hyphenated names
        "However, North's revenue was the highest in Q3.",  # sentence starter, possessive, acronym with digit
        "- **North**: 48,210.55\n- South-East: 39,001.20",  # bullets and emphasis
        "EMEA grew. It was led by North.",
        "Based on the data, North wins. Overall, the answer is North.",
        "North wins, I think, and I'm sure OK is fine.",  # "I" is capitalised everywhere
    ],
)
def test_supported_answers_have_no_unsupported_names(answer: str) -> None:
    assert names(answer) == []


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ("Atlantis had the highest revenue.", ["Atlantis"]),  # an invented name starting a sentence
        ("The highest revenue was in the West region.", ["West"]),
        ("North beat Lemuria and APAC.", ["Lemuria", "APAC"]),
        ("Revenue peaked in Q4 for North-West.", ["Q4", "North-West"]),  # North-West: West is not in the data
        ("Atlantis, Atlantis and Atlantis's neighbours.", ["Atlantis"]),  # reported once
    ],
)
def test_invented_names_are_reported_in_order(answer: str, expected: list[str]) -> None:
    assert names(answer) == expected


def test_ignored_names_are_always_allowed() -> None:
    assert names("Acme's North region led.", ignore=("acme",)) == []


async def test_numbers_and_names_together_and_the_goal_counts_by_default() -> None:
    check = EvidenceCheck(Prompts())
    goal = "Which region had the highest revenue in November 2026?"
    assert await check.review("In November 2026, North led with 48,210.55.", Seen(goal, (TOOL_OUTPUT,))) is None
    rejection = await check.review("In November 2026, Atlantis led with 51,000.", Seen(goal, ()))
    assert rejection is not None and rejection.kind == "evidence" and rejection.back_to_tools
    assert "the goal only: the agent called none of its tools" in rejection.error and "51000" in rejection.error and "Atlantis" in rejection.error
    assert "51000, Atlantis" in rejection.request


async def test_without_the_goal_a_restated_question_needs_a_tool_result() -> None:
    check = EvidenceCheck(Prompts(), from_goal=False)
    rejection = await check.review("In November 2026, North led.", Seen("Which region led in November 2026?", ()))
    assert rejection is not None and "2026" in rejection.error and "November" in rejection.error
