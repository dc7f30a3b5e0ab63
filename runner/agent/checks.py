"""Checks on a final answer: a list of check objects built from the agent's spec.

``output_schema``: the answer is JSON that validates against the schema.

``evidence``: every number and name in the answer must appear in what the run found (its
tool results, knowledge citations included, and by default the goal); see
:mod:`runner.agent.evidence`.

``judge``: a declared judge agent reads the goal, the answer, the criteria and the tool
results, and returns pass/fail with a reason; its call goes through the run's ledger like
any other, so it counts against the caps.

``figures_in_order``: every figure of the goal's ``- label: value`` lines is in the answer, in
order: each number (small ones too: a figure line states it), and a value without a number
(``no sales recorded``, a region's name) as written.

Always, when an agent has any check: the answer must not repeat a prompt the framework sent
it in this run (a repair request): a small model that echoes "Your answer states things..."
has not answered, and the echo must never be delivered as its answer.

``numbers_from_prompt``: every number and date in the answer must come from the prompt (the
goal and the tool results the agent saw). A number may be a rounding of one given
(``4247.3`` -> ``4,247`` is fine); small integers (0-10) are ignored since prose uses them
freely. It catches the commonest failure of small models writing from figures: invented
or altered numbers.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from runner import untrusted_json
from runner.config.specs import AgentSpec
from runner.model.base import Message
from runner.prompts import Prompts

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


def figure_lines(goal: str) -> list[str]:
    """The ``- label: value`` lines of a goal."""
    return [m.group(0).strip() for m in FIGURE_LINE.finditer(goal)]


def missing_figures(answer: str, goal: str) -> list[str]:
    """Figures of the goal's ``- label: value`` lines the answer lacks or reorders: every
    number of a value (0-10 included: a figure line states it, it is not prose), and a
    value with no number in it as a phrase (case and spacing aside)."""
    given = [value for value, _ in _numbers(answer)]
    prose = _phrase(answer)
    missing, position = [], 0
    for line in figure_lines(goal):
        value_text = line.split(":", 1)[1]
        numbers = _numbers(value_text)
        if not numbers:
            if _phrase(value_text) and _phrase(value_text) not in prose:
                missing.append(repr(value_text.strip()))
            continue
        for value, decimals in numbers:
            for i in range(position, len(given)):
                if round(given[i], decimals) == round(value, decimals) or round(abs(given[i]), decimals) == round(abs(value), decimals):
                    position = i + 1
                    break
            else:
                missing.append(f"{value:.{decimals}f}")
    return missing


def _phrase(text: str) -> str:
    """``text`` for a phrase comparison: lower case, words separated by single spaces."""
    return " ".join(WORDS.findall(text.lower()))


WORDS = re.compile(r"[^\W_]+", re.UNICODE)


def figures_fallback(goal: str, prompts: Prompts | None = None) -> str:
    """A plain rendering of the goal's figures, for when a model's text is rejected."""
    note = (prompts or Prompts()).render("figures_fallback")
    lines = figure_lines(goal)
    return note + "\n" + "\n".join(lines) if lines else note


RejectionKind = Literal["output_schema", "ungrounded", "evidence", "judge", "judge_error", "echoed_prompt"]
Consult = Callable[[str, list[Message]], Awaitable[str]]
"""Ask another declared agent (by name) and get its reply; the loop reserves the call."""


@dataclass(frozen=True)
class Rejection:
    """Why an answer was refused: what the model is told, and what the run reports if
    repairs run out. ``back_to_tools``: the repair turn may use tools (to find evidence);
    ``final``: no repair can help (the judge gave no verdict): the step fails at once."""

    request: str
    error: str
    kind: RejectionKind
    back_to_tools: bool = False
    final: bool = False


@dataclass(frozen=True)
class Seen:
    """What the agent was given: its goal and every tool result it saw (as first shown to it,
    before any compaction of the history), with the arguments of the call that produced each
    (``tool_arguments[i]`` is the JSON text the model sent for ``tool_outputs[i]``); whether
    it has tools at all; and the prompts the framework sent it after the goal (repair requests)."""

    goal: str
    tool_outputs: tuple[str, ...]
    tool_arguments: tuple[str, ...] = ()
    has_tools: bool = True
    prompts_sent: tuple[str, ...] = ()

    def evidence_sources(self, from_goal: bool) -> list[str]:
        """What an answer may draw on: every tool result without the text that merely echoes
        its call's arguments (:func:`runner.agent.echo.without_echo`), and the goal when
        ``from_goal``."""
        from runner.agent.echo import without_echo

        arguments = self.tool_arguments or ("",) * len(self.tool_outputs)
        results = [without_echo(output, args) for output, args in zip(self.tool_outputs, arguments, strict=True)]
        return [self.goal, *results] if from_goal else results

    def evidence_label(self, from_goal: bool) -> str:
        """What the evidence was, in words: ``the goal and 2 tool result(s)``, ``the goal only:
        the agent has no tools``."""
        count = len(self.tool_outputs)
        if count:
            return f"the goal and {count} tool result(s)" if from_goal else f"{count} tool result(s)"
        why = "the agent called none of its tools" if self.has_tools else "the agent has no tools"
        return f"the goal only: {why}" if from_goal else f"none: {why}, and from_goal is false"


class AnswerCheck(Protocol):
    """One check on a final answer; the loop runs the agent's checks in order. A check that
    needs a model (the judge) makes its call through the run's ledger, so ``review`` is async."""

    async def review(self, answer: str, seen: Seen) -> Rejection | None: ...


@dataclass(frozen=True)
class OutputSchemaCheck:
    """The answer is JSON (optionally fenced) that validates against ``schema``."""

    schema: dict[str, Any]
    prompts: Prompts

    async def review(self, answer: str, seen: Seen) -> Rejection | None:
        _, problems = parse_json_answer(answer, self.schema)
        if not problems:
            return None
        request = self.prompts.render("repair_schema", schema=json.dumps(self.schema), problems=problems)
        return Rejection(request, f"output does not match the schema: {problems}", "output_schema")


@dataclass(frozen=True)
class NumbersFromPrompt:
    """Every number and date in the answer comes from the goal or a tool result."""

    prompts: Prompts

    async def review(self, answer: str, seen: Seen) -> Rejection | None:
        invented = ungrounded_numbers(answer, [seen.goal, *seen.tool_outputs])
        if not invented:
            return None
        listed = ", ".join(invented)
        return Rejection(self.prompts.render("numbers_turn", numbers=listed), f"numbers not in the prompt: {listed}", "ungrounded")


@dataclass(frozen=True)
class FiguresInOrder:
    """Every figure of the goal's ``- label: value`` lines is in the answer, in order."""

    prompts: Prompts

    async def review(self, answer: str, seen: Seen) -> Rejection | None:
        missing = missing_figures(answer, seen.goal)
        if not missing:
            return None
        listed = ", ".join(missing)
        return Rejection(
            self.prompts.render("order_turn", numbers=listed), f"figures missing or out of order: {listed}", "ungrounded"
        )


@dataclass(frozen=True)
class EvidenceCheck:
    """Every number and name in the answer appears in the run's tool results (knowledge
    citations included) or, when ``from_goal``, in the goal."""

    prompts: Prompts
    from_goal: bool = True
    ignore: tuple[str, ...] = ()

    async def review(self, answer: str, seen: Seen) -> Rejection | None:
        from runner.agent.evidence import Evidence, unsupported_names  # only agents with an evidence check

        sources = seen.evidence_sources(self.from_goal)
        numbers = ungrounded_numbers(answer, sources)
        names = unsupported_names(answer, Evidence.of(sources), self.ignore)
        if not numbers and not names:
            return None
        claims = ", ".join([*numbers, *names])
        prompt = "evidence_turn" if seen.has_tools else "evidence_turn_no_tools"
        request = self.prompts.render(prompt, claims=claims)
        error = f"answer not supported by the run's evidence ({seen.evidence_label(self.from_goal)}): {claims}"
        return Rejection(request, error, "evidence", back_to_tools=seen.has_tools)


REQUEST_PROMPTS = (
    "final_turn", "repair_schema", "numbers_turn", "order_turn", "evidence_turn", "evidence_turn_no_tools", "judge_turn",
    "echo_turn",
)  # fmt: skip
"""The prompts that ask the model to try again: an answer repeating one of their fixed sentences
is no answer, whether or not this run sent it (a resampled turn never shows it the request)."""


@dataclass(frozen=True)
class NotAPrompt:
    """The answer does not repeat a prompt the framework sent in this run (see the module doc)."""

    prompts: Prompts

    async def review(self, answer: str, seen: Seen) -> Rejection | None:
        from runner.agent.echo import echoed_prompt

        echoed = echoed_prompt(answer, [*seen.prompts_sent, *(self.prompts.text(name) for name in REQUEST_PROMPTS)])
        if echoed is None:
            return None
        return Rejection(
            self.prompts.render("echo_turn"), f"the answer repeats the framework's own request instead of answering: {echoed!r}",
            "echoed_prompt",
        )


MAX_JUDGE_EVIDENCE_CHARS = 12_000


@dataclass(frozen=True)
class JudgeCheck:
    """A declared judge agent decides, against ``criteria``, whether the answer passes."""

    judge: str
    criteria: tuple[str, ...]
    prompts: Prompts
    consult: Consult

    async def review(self, answer: str, seen: Seen) -> Rejection | None:
        evidence = "\n---\n".join(seen.tool_outputs)[-MAX_JUDGE_EVIDENCE_CHARS:]
        request = self.prompts.render("judge_request", goal=seen.goal, answer=answer, evidence=evidence, criteria=list(self.criteria))
        reply = await self.consult(self.judge, [Message("user", request)])
        verdict = parse_verdict(reply)
        if verdict is None:
            excerpt = " ".join(reply.split())[:200]
            return Rejection("", f"the judge '{self.judge}' gave no verdict (expected JSON with pass and reason): {excerpt!r}", "judge_error", final=True)
        passed, reason = verdict
        if passed:
            return None
        return Rejection(
            self.prompts.render("judge_turn", reason=reason), f"the judge '{self.judge}' rejected the answer: {reason}", "judge",
            back_to_tools=True,
        )  # fmt: skip


def parse_verdict(reply: str) -> tuple[bool, str] | None:
    """``(passed, reason)`` from a judge's reply: JSON ``{"pass": bool, "reason": str}`` (also
    ``"verdict": "pass"|"fail"``, fenced or not), else a reply starting PASS or FAIL."""
    value, _ = parse_json_answer(reply, {})
    if isinstance(value, dict):
        reason = str(value.get("reason") or "no reason given")
        if isinstance(value.get("pass"), bool):
            return value["pass"], reason
        if str(value.get("verdict", "")).lower() in ("pass", "fail"):
            return str(value["verdict"]).lower() == "pass", reason
        return None
    words = reply.strip().split(None, 1)
    if words and words[0].strip(":.,").upper() in ("PASS", "FAIL"):
        return words[0].strip(":.,").upper() == "PASS", (words[1].strip() if len(words) > 1 else "no reason given")
    return None


def build_checks(
    agent: AgentSpec, output_schema: dict[str, Any] | None, prompts: Prompts, consult: Consult | None = None
) -> list[AnswerCheck]:
    """The checks an agent's answers go through, from its spec (the schema check first, the
    judge last: the cheap checks run before a model is asked)."""
    checks: list[AnswerCheck] = []
    if output_schema is not None:
        checks.append(OutputSchemaCheck(output_schema, prompts))
    if agent.evidence is not None:
        checks.append(EvidenceCheck(prompts, agent.evidence.from_goal, agent.evidence.ignore))
    if agent.numbers_from_prompt:
        checks.append(NumbersFromPrompt(prompts))
    if agent.figures_in_order:
        checks.append(FiguresInOrder(prompts))
    if agent.judge is not None and consult is not None:
        checks.append(JudgeCheck(agent.judge.agent, agent.judge.criteria, prompts, consult))
    return [NotAPrompt(prompts), *checks] if checks else checks  # no check, no repair request to echo


def parse_json_answer(answer: str | None, schema: dict[str, Any]) -> tuple[Any, str]:
    """The answer parsed as JSON (a Markdown code fence is allowed) and its schema problems."""
    text = (answer or "").strip()
    if text.startswith("```"):
        text = text.strip("`")
        text = text.split("\n", 1)[1] if "\n" in text else text
        text = text.removesuffix("```").strip()
    try:
        value = untrusted_json.loads(text)
    except json.JSONDecodeError as exc:
        return None, f"not valid JSON ({exc.msg} at position {exc.pos})"
    except untrusted_json.JsonTooDeep as exc:
        return None, f"not accepted: {exc}"
    from runner.config.schema import validate_value  # jsonschema's wrapper: only answers with a schema

    problems = validate_value(value, schema)
    return value, "; ".join(problems[:5])
