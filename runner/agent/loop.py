"""The think -> act loop of one agent.

One function, top to bottom: check the caps, call the model with the agent's tools, run
every tool call it asked for and feed each result back, repeat until the model answers
without tool calls (or calls a terminating tool). Tool failures the model can fix become
observations; caps and endpoint failures end the run with a status and a reason; bugs in
our own code propagate.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from runner import untrusted_json
from runner.agent.checks import Rejection, figures_fallback, grounding_rejection
from runner.agent.context import compact, history_budget, truncate_output
from runner.agent.stuck import StuckDetector
from runner.caps.budget import Budget, Estimate
from runner.caps.pricing import Pricer
from runner.config.schema import validate_value
from runner.config.specs import AgentSpec
from runner.errors import CapReached, ModelError, ToolFailure
from runner.model.base import ChatModel, Message, ModelRequest, ModelResponse, ToolCall, Usage
from runner.model.tokens import estimate_completion_tokens
from runner.runs.types import RateGate
from runner.tools.base import ToolResult

FINAL_TURN = (
    "You are repeating yourself without making progress ({reason}). Do not call any tools. "
    "Answer now with your best final answer from what you already know."
)
REPAIR_TURN = (
    "Your final answer must be JSON that validates against this JSON Schema:\n{schema}\n"
    "It did not: {problems}\nReply with the corrected JSON only."
)


class Recorder(Protocol):
    """Where the loop reports what happened (the run store and the event stream)."""

    def model_call(self, call: ModelCallRecord) -> None: ...

    def tool_call(self, call: ToolCallRecord) -> None: ...


class Tools(Protocol):
    """The tools one agent may use, bound to its run's workspace."""

    def schemas(self) -> tuple[dict[str, Any], ...]: ...

    def terminates(self, name: str) -> bool: ...

    async def call(self, name: str, arguments: str) -> ToolResult: ...


@dataclass(frozen=True)
class ModelCallRecord:
    step_id: str
    agent: str
    model: str
    seq: int
    input_tokens: int
    output_tokens: int
    cached_input_tokens: int
    cost_usd: float
    latency_seconds: float
    status: str  # ok | error
    error: str | None = None
    tool_calls: int = 0
    content: str | None = None


@dataclass(frozen=True)
class ToolCallRecord:
    step_id: str
    agent: str
    seq: int
    name: str
    arguments: str
    status: str  # ok | error
    duration_seconds: float
    output_excerpt: str
    artifacts: tuple[str, ...] = ()


@dataclass
class AgentEnv:
    """Everything one agent run uses besides its spec and goal."""

    model: ChatModel
    tools: Tools
    budget: Budget
    pricer: Pricer
    recorder: Recorder
    step_id: str = "main"
    rate_gate: RateGate | None = None
    output_schema: dict[str, Any] | None = None
    model_id: str | None = None  # the model actually called (after overrides / embedded fallback)


@dataclass
class AgentOutcome:
    """How one agent run ended."""

    status: str  # completed | failed | capped | stuck
    output: Any = None
    error: str | None = None
    error_kind: str | None = None
    model_calls: int = 0
    tool_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    artifacts: list[str] = field(default_factory=list)
    data: list[Any] = field(default_factory=list)
    messages: list[Message] = field(default_factory=list)


async def run_agent(agent: AgentSpec, goal: str, env: AgentEnv) -> AgentOutcome:
    """Run ``agent`` on ``goal`` until it answers, gets stuck, fails or reaches a cap."""
    run = _AgentRun(agent, goal, env)
    messages = [Message("system", agent.system_prompt or "You are a helpful agent.")]
    for example_input, example_output in agent.examples:
        messages += [Message("user", example_input), Message("assistant", example_output)]
    messages.append(Message("user", goal))
    stuck = StuckDetector(agent.max_repeats, agent.max_invalid_calls)
    try:
        while True:
            if stuck.stuck:
                messages.append(Message("user", FINAL_TURN.format(reason=stuck.reason)))
                response = await run.think(messages, allow_tools=False)
                return run.finish("stuck", response.content, error=f"stuck: {stuck.reason}", kind="stuck")
            response = await run.think(messages, allow_tools=True)
            messages.append(Message("assistant", response.content, tool_calls=response.tool_calls))
            if not response.tool_calls:
                return await run.final_answer(messages, response.content)
            for call in response.tool_calls:
                answer = await run.act(call, messages, stuck)
                if answer is not None:
                    return await run.final_answer(messages, answer)
            if agent.next_step_prompt:
                messages.append(Message("user", agent.next_step_prompt))
    except CapReached as cap:
        return run.finish("capped", None, error=str(cap), kind=cap.cap)
    except ModelError as exc:
        return run.finish("failed", None, error=str(exc), kind=exc.kind)
    finally:
        run.outcome.messages = messages


class _AgentRun:
    """State of one agent run; each method is one named part of the loop."""

    def __init__(self, agent: AgentSpec, goal: str, env: AgentEnv):
        self.agent, self.goal, self.env = agent, goal, env
        self.outcome = AgentOutcome(status="running")
        self.tool_seq = 0
        self.repairs = 0

    async def think(self, messages: list[Message], *, allow_tools: bool) -> ModelResponse:
        """One model call, reserved against every cap before it is sent."""
        agent, env = self.agent, self.env
        history = compact(messages, history_budget(agent), agent.context.keep_last_messages)
        messages[:] = history
        tools = env.tools.schemas() if allow_tools else ()
        request = ModelRequest(
            model=env.model_id or agent.model.id,
            messages=tuple(history),
            tools=tools if env.model.supports_tools else (),
            tool_choice=agent.tool_choice if tools else "none",
            max_tokens=agent.model.max_tokens,
            temperature=agent.model.temperature,
        )
        estimate = env.pricer.estimate(request, agent.model.max_tokens)
        if env.rate_gate is not None:  # wait first, so the caps (wall time too) are checked after the wait
            await env.rate_gate.acquire(estimate.input_tokens + estimate.output_tokens)
        reservation = env.budget.reserve(estimate)
        started = time.monotonic()
        seq = self.outcome.model_calls + 1
        try:
            response = await env.model.complete(request)
        except ModelError as exc:
            if exc.kind == "timeout":  # the endpoint may have billed a call we never saw: count the worst case
                reservation.settle(estimate.input_tokens, estimate.output_tokens, 0, estimate.cost_usd)
            else:
                reservation.release()
            self._record_model(seq, None, 0.0, time.monotonic() - started, error=str(exc))
            raise
        except BaseException:
            reservation.release()  # cancelled, or our own bug: never leave the amount held
            raise
        usage = _trusted_usage(response, estimate)
        response = replace(response, usage=usage)
        cost = env.pricer.cost(usage)
        reservation.settle(usage.input_tokens, usage.output_tokens, usage.cached_input_tokens, cost)
        self._record_model(seq, response, cost, time.monotonic() - started)
        return response

    async def act(self, call: ToolCall, messages: list[Message], stuck: StuckDetector) -> str | None:
        """Run one tool call and append its observation. Returns the answer of a terminating tool."""
        env = self.env
        env.budget.take_tool_call()
        stuck.observe_call(call.name, call.arguments)
        started = time.monotonic()
        self.tool_seq += 1
        try:
            result = await env.tools.call(call.name, call.arguments)
            content, status, valid = result.content, "ok", True
        except ToolFailure as failure:
            result, content, status = None, f"error: {failure}", "error"
            valid = "invalid arguments" not in content and "unknown tool" not in content
        self.outcome.tool_calls += 1
        content = truncate_output(content, self.agent.context.max_tool_output_chars)
        stuck.observe_result(content, valid=valid)
        if result is not None:
            self.outcome.artifacts.extend(a for a in result.artifacts if a not in self.outcome.artifacts)
            if result.data is not None:
                self.outcome.data.append(result.data)
        env.recorder.tool_call(
            ToolCallRecord(
                env.step_id, self.agent.name, self.tool_seq, call.name, call.arguments, status,
                time.monotonic() - started, content[:500], tuple(result.artifacts) if result else (),
            )
        )
        messages.append(Message("tool", content, tool_call_id=call.id, name=call.name))
        if status == "ok" and env.tools.terminates(call.name):
            return _terminate_answer(call.arguments)
        return None

    async def final_answer(self, messages: list[Message], answer: str | None) -> AgentOutcome:
        """Check the answer (output schema, then grounding), with bounded repair turns."""
        schema = self.env.output_schema or self.agent.output_schema
        value: Any = answer
        if schema is not None:
            value, problems = _parse_and_validate(answer, schema)
            if problems:
                request = REPAIR_TURN.format(schema=json.dumps(schema), problems=problems)
                error = f"output does not match the schema: {problems}"
                return await self.repair(messages, Rejection(request, error, "output_schema"), answer)
        rejection = grounding_rejection(
            answer or "", self.goal, [m.content or "" for m in messages if m.role == "tool"],
            numbers_from_prompt=self.agent.numbers_from_prompt, figures_in_order=self.agent.figures_in_order,
        )
        if rejection:
            return await self.repair(messages, rejection, answer)
        return self.finish("completed", value)

    async def repair(self, messages: list[Message], rejection: Rejection, answer: str | None) -> AgentOutcome:
        """One more turn for the model to fix its answer, or fail (or fall back) when repairs are used up."""
        resample = rejection.kind == "ungrounded" and self.agent.checks_repair == "resample"
        if self.repairs >= self.agent.max_repairs:
            if rejection.kind == "ungrounded" and self.agent.checks_fallback == "figures":
                return self.finish("completed", figures_fallback(self.goal))
            return self.finish("failed", answer, error=rejection.error, kind=rejection.kind)
        self.repairs += 1
        if resample and messages[-1].role == "assistant" and not messages[-1].tool_calls:
            messages.pop()  # ask again without the rejected answer
        else:
            messages.append(Message("user", rejection.request))
        response = await self.think(messages, allow_tools=False)
        messages.append(Message("assistant", response.content))
        return await self.final_answer(messages, response.content)

    def finish(self, status: str, output: Any, *, error: str | None = None, kind: str | None = None) -> AgentOutcome:
        self.outcome.status, self.outcome.output = status, output
        self.outcome.error, self.outcome.error_kind = error, kind
        return self.outcome

    def _record_model(
        self, seq: int, response: ModelResponse | None, cost: float, latency: float, error: str | None = None
    ) -> None:
        usage = response.usage if response else None
        if response is not None:
            self.outcome.model_calls += 1
            self.outcome.input_tokens += usage.input_tokens if usage else 0
            self.outcome.output_tokens += usage.output_tokens if usage else 0
            self.outcome.cost_usd += cost
        self.env.recorder.model_call(
            ModelCallRecord(
                step_id=self.env.step_id,
                agent=self.agent.name,
                model=self.env.model_id or self.agent.model.id,
                seq=seq,
                input_tokens=usage.input_tokens if usage else 0,
                output_tokens=usage.output_tokens if usage else 0,
                cached_input_tokens=usage.cached_input_tokens if usage else 0,
                cost_usd=cost,
                latency_seconds=latency,
                status="ok" if response else "error",
                error=error,
                tool_calls=len(response.tool_calls) if response else 0,
                content=response.content if response else None,
            )
        )


def _trusted_usage(response: ModelResponse, estimate: Estimate) -> Usage:
    """The response's usage, or our estimate when the endpoint reported none (a missing or
    zero ``usage`` must not make calls free against a money cap)."""
    usage = response.usage
    input_tokens, output_tokens = max(usage.input_tokens, 0), max(usage.output_tokens, 0)
    if input_tokens == 0 and output_tokens == 0:
        calls = tuple((c.name, c.arguments) for c in response.tool_calls)
        return Usage(estimate.input_tokens, estimate_completion_tokens(response.content, calls), 0)
    return Usage(input_tokens, output_tokens, min(max(usage.cached_input_tokens, 0), input_tokens))


def _terminate_answer(arguments: str) -> str:
    try:
        parsed = untrusted_json.loads(arguments)
    except ValueError:
        return arguments
    if isinstance(parsed, dict):
        return str(parsed.get("answer", parsed.get("output", "")))
    return str(parsed)


def _parse_and_validate(answer: str | None, schema: dict[str, Any]) -> tuple[Any, str]:
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
    problems = validate_value(value, schema)
    return value, "; ".join(problems[:5])
