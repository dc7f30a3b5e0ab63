"""The think -> act loop of one agent.

One function, top to bottom: check the caps, call the model with the agent's tools, run
every tool call it asked for and feed each result back, repeat until the model answers
without tool calls (or calls a terminating tool). Tool failures the model can fix become
observations; caps and endpoint failures end the run with a status and a reason; bugs in
our own code propagate. The text the loop sends lives in ``runner/prompts/agent.yaml``; the
answer checks are objects from :mod:`runner.agent.checks`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from runner.agent.call_cache import CallAnswers
from runner.agent.checks import AnswerCheck, Rejection, Seen, build_checks, figures_fallback, parse_json_answer
from runner.agent.context import compact, history_budget, summary_span, transcript, truncate_output
from runner.agent.fallback import FallbackRoute, ModelChoice
from runner.agent.ledger import CallLedger
from runner.agent.stuck import StuckDetector
from runner.caps.budget import Budget, Estimate, within_deadline
from runner.caps.pricing import Pricer, needs_exact_prompt
from runner.config.profiles import DEFAULT_PROFILE, ModelProfile
from runner.config.specs import AgentSpec
from runner.core.calls import CallStatus, Exchange, ModelCallEntry, ToolCallEntry
from runner.core.degradation import Degradation
from runner.core.ports import RateGate
from runner.core.sources import Source
from runner.core.status import Status
from runner.core.usage import Usage
from runner.errors import CapReached, InvalidToolCall, ModelError, ToolFailure
from runner.model.base import ChatModel, Message, ModelRequest, ModelResponse, ToolCall
from runner.model.call_settings import CallSettings, call_settings
from runner.model.tokens import estimate_completion_tokens
from runner.prompts import Prompts
from runner.tools.base import ToolResult

FIGURES_FALLBACK_KINDS = frozenset({"ungrounded", "evidence", "judge", "echoed_prompt"})
"""Rejections of the model's text that ``fallback: figures`` answers with the goal's figure
lines (a schema-shaped answer cannot be replaced by them)."""


class Recorder(Protocol):
    """Where the loop reports what happened (the run store and the event stream)."""

    def call_reserved(self, call: ModelCallEntry) -> int: ...

    def model_call(self, call: ModelCallEntry, ledger_id: int | None = None) -> None: ...

    def tool_call(self, call: ToolCallEntry) -> None: ...


class Tools(Protocol):
    """The tools one agent may use, bound to its run's workspace."""

    def schemas(self) -> tuple[dict[str, Any], ...]: ...

    def terminates(self, name: str) -> bool: ...

    async def call(self, name: str, arguments: str, deadline: float | None = None) -> ToolResult:
        """Run one call; ``deadline`` (``time.monotonic()``) bounds sandboxed work."""


@dataclass(frozen=True)
class ModelBinding:
    """A model to call, how its calls are priced, and the agent they are recorded under: the
    agent's own, or another declared agent's (a judge). Every call goes through the same
    reservation path (:class:`~runner.agent.ledger.CallLedger`) in the agent's budget."""

    agent: str
    model: ChatModel
    pricer: Pricer
    model_id: str
    settings: CallSettings  # the request fields of every call (runner.model.call_settings)
    system_prompt: str = ""
    endpoint_identity: str = ""  # who answers: part of a cached answer's key (runner.agent.call_cache)
    fallback: ModelBinding | None = None  # the agent's fallback_model, called while a budget degrades (runner.agent.fallback)


@dataclass
class AgentEnv:
    """Everything one agent run uses besides its spec and goal. ``budget`` is this agent
    run's own scope: what it spent is the outcome's usage."""

    model: ChatModel
    tools: Tools
    budget: Budget
    pricer: Pricer
    recorder: Recorder
    step_id: str = "main"
    rate_gate: RateGate | None = None
    output_schema: dict[str, Any] | None = None
    model_id: str | None = None  # the model actually called (after overrides / embedded fallback)
    other_agent: Callable[[str], ModelBinding] | None = None  # another agent's model (a judge's), by name
    prompt_cache_key: str | None = None  # sent with every call (runner.model.prompt_cache)
    endpoint_identity: str = ""  # who answers the agent's calls (runner.agent.call_cache.endpoint_identity)
    profile: ModelProfile | None = None  # the model's profile (runner.config.profiles); None: the default one
    call_cache: CallAnswers | None = None  # the result cache (cache: {ttl}), or a provider batch's stored answers
    tool_settings: dict[str, dict[str, Any]] = field(default_factory=dict)  # by tool name: part of a cached tool call's key
    fallback: FallbackRoute | None = None  # the agent's fallback_model (on_exceed: degrade budgets)
    on_degraded: Callable[[Degradation], None] | None = None  # told when the step first calls a fallback model


@dataclass
class AgentOutcome:
    """How one agent run ended; ``usage`` is what its budget scope spent."""

    status: Status
    output: Any = None
    error: str | None = None
    error_kind: str | None = None
    error_scope: str | None = None  # the budget scope of the cap that stopped it
    error_budget: str | None = None  # the budget over time whose window that scope is, if one is
    usage: Usage = field(default_factory=Usage)
    artifacts: list[str] = field(default_factory=list)
    data: list[Any] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    sources: list[Source] = field(default_factory=list)  # what the tools found, for citations
    cached_calls: int = 0  # model and tool calls answered from the result cache
    degraded: list[Degradation] = field(default_factory=list)  # where calls went to a fallback model


@dataclass(frozen=True)
class Termination:
    """A terminating tool's verdict: the answer, and whether the agent gave up."""

    answer: str
    failed: bool


async def run_agent(agent: AgentSpec, goal: str, env: AgentEnv) -> AgentOutcome:
    """Run ``agent`` on ``goal`` until it answers, gets stuck, fails or reaches a cap."""
    run = _AgentRun(agent, goal, env)
    messages = opening_messages(agent, goal, run.prompts)
    stuck = StuckDetector(agent.max_repeats, agent.max_invalid_calls)
    try:
        while True:
            if stuck.stuck:
                messages.append(Message("user", run.prompts.render("final_turn", reason=stuck.reason)))
                response = await run.think(messages, allow_tools=False)
                return run.finish("stuck", response.content, error=f"stuck: {stuck.reason}", kind="stuck")
            response = await run.think(messages, allow_tools=True)
            messages.append(Message("assistant", response.content, tool_calls=response.tool_calls))
            if response.tool_calls:
                outcome = await run.act_all(response.tool_calls, messages, stuck)
            else:
                outcome = await run.final_answer(messages, response.content)
            if outcome is not None:  # else: more work (tool results, or a check sent it back to its tools)
                return outcome
    except CapReached as cap:
        return run.finish("capped", None, error=str(cap), kind=cap.cap, scope=cap.scope, budget=cap.budget)
    except ModelError as exc:
        return run.finish("failed", None, error=str(exc), kind=exc.kind)


def opening_messages(agent: AgentSpec, goal: str, prompts: Prompts | None = None) -> list[Message]:
    """The first turn's messages: system prompt, the examples, then the goal (also what a
    provider batch sends for each row, so both paths ask the same question)."""
    system = agent.system_prompt or (prompts or Prompts(agent.prompts)).render("system")
    messages = [Message("system", system)]
    for example_input, example_output in agent.examples:
        messages += [Message("user", example_input), Message("assistant", example_output)]
    messages.append(Message("user", goal))
    return messages


class _AgentRun:
    """State of one agent run; each method is one named part of the loop."""

    def __init__(self, agent: AgentSpec, goal: str, env: AgentEnv):
        self.agent, self.goal, self.env = agent, goal, env
        self.prompts = Prompts(agent.prompts)
        self.schema = env.output_schema or agent.output_schema
        settings = call_settings(agent.model, env.profile or ModelProfile(DEFAULT_PROFILE), self.schema, env.prompt_cache_key)
        self.own = ModelBinding(
            agent.name, env.model, env.pricer, env.model_id or agent.model.id, settings, endpoint_identity=env.endpoint_identity,
            fallback=fallback_binding(agent.name, env.fallback, self.schema),
        )
        self.models = ModelChoice(env.budget, env.step_id, env.on_degraded)
        self.checks: list[AnswerCheck] = build_checks(agent, self.schema, self.prompts, self.consult)
        self.outcome = AgentOutcome(status="running")
        self.observations: list[str] = []  # every tool result as the model first saw it (compaction keeps this whole)
        self.observed_arguments: list[str] = []  # the arguments of the call behind each observation
        self.prompts_sent: list[str] = []  # the repair requests sent after the goal (an answer must not echo them)
        self.model_seq = self.tool_seq = self.repairs = 0

    async def think(self, messages: list[Message], *, allow_tools: bool) -> ModelResponse:
        """One model call, reserved against every cap (durably) before it is sent, and cut off
        at the earliest wall-clock deadline of the scopes around it."""
        agent, env = self.agent, self.env
        if agent.context.summarize:
            await self.summarize(messages)
        messages[:] = compact(messages, history_budget(agent), agent.context.keep_last_messages, self.prompts)
        tools = env.tools.schemas() if allow_tools else ()
        return await self.send(messages, self.own, tools=tools, tool_choice=agent.tool_choice, structured=True)

    async def send(
        self, messages: list[Message], binding: ModelBinding, *, tools: tuple[dict[str, Any], ...] = (),
        tool_choice: str = "none", structured: bool = False,
    ) -> ModelResponse:
        """Send ``messages`` to ``binding``'s model: reserved in every budget scope (durably)
        before it is sent, cut off at the earliest wall-clock deadline around it. ``structured``:
        the agent's own turn, which carries the strict response format when there is one."""
        env = self.env
        binding = self.models.choose(binding, self.model_seq + 1)
        request = binding.settings.request(
            binding.model_id, tuple(messages), tools=tools if binding.model.supports_tools else (),
            tool_choice=tool_choice if tools else "none", structured=structured,
        )
        token_gate = env.rate_gate is not None and env.rate_gate.limits_tokens
        estimate = binding.pricer.estimate(request, binding.settings.max_tokens, exact=needs_exact_prompt(env.budget, token_gate))
        async with within_deadline(env.budget):
            if env.rate_gate is not None:  # wait first, so the caps are checked after the wait
                await env.rate_gate.acquire(estimate.input_tokens + estimate.output_tokens)
            return await self._call(request, estimate, binding)

    async def summarize(self, messages: list[Message]) -> None:
        """When the history is over budget, the model summarises its older middle (a call
        reserved and recorded like any other); the summary replaces those messages."""
        span = summary_span(messages, history_budget(self.agent), self.agent.context.keep_last_messages, 2 + 2 * len(self.agent.examples))
        if span is None:
            return
        start, end = span
        request = [
            Message("system", self.prompts.render("summary_system")),
            Message("user", self.prompts.render("summarize_history", goal=self.goal, transcript=transcript(messages[start:end]))),
        ]
        response = await self.send(request, self.own)
        messages[start:end] = [Message("user", self.prompts.render("summary_note", summary=response.content or ""))]

    async def consult(self, agent_name: str, messages: list[Message]) -> str:
        """Ask another declared agent (a judge); its call counts against this agent's caps."""
        if self.env.other_agent is None:
            raise ModelError("bad_request", f"agent '{agent_name}' cannot be consulted here")
        binding = self.env.other_agent(agent_name)
        system = [Message("system", binding.system_prompt)] if binding.system_prompt else []
        return (await self.send([*system, *messages], binding)).content or ""

    async def _call(self, request: ModelRequest, estimate: Estimate, binding: ModelBinding) -> ModelResponse:
        env = self.env
        template = ModelCallEntry(
            env.step_id, binding.agent, binding.model_id, self.model_seq + 1, Usage(), 0.0, "reserved",
            exchange=_exchange(request), tariff=binding.pricer.tariff,
        )
        cached = env.call_cache.model_response(request, binding.endpoint_identity) if env.call_cache is not None else None
        if cached is not None and cached.recorded:
            return self._served_from_cache(cached, template)
        # A call, or a stored answer its record lost (a provider batch's, a retry elsewhere): reserved and recorded as one.
        ledger = CallLedger(env.budget, estimate, env.recorder, template, reprice=binding.pricer.reprice)
        await ledger.open_in_group()
        started = time.monotonic()
        try:
            response = cached if cached is not None else await binding.model.complete(request, ledger)
        except ModelError as exc:
            ledger.failed(exc.kind, str(exc))
            raise
        except BaseException:  # cancelled in flight (a deadline, Ctrl-C), or our own bug
            ledger.abandoned("cancelled while the call was in flight")
            raise
        finally:
            self.model_seq += ledger.attempts
        usage = _trusted_usage(response, estimate)
        usage = replace(usage, cost_usd=binding.pricer.cost(usage, response.tariff, response.service_tier))
        ledger.answered(
            usage, time.monotonic() - started, tool_calls=len(response.tool_calls), content=response.content,
            finish_reason=response.finish_reason, reply=_reply(response),
        )
        self._flag_excess(usage, binding.pricer.reprice(estimate, response.tariff), binding.pricer.tier, response.service_tier)
        if env.call_cache is not None:
            env.call_cache.keep_response(request, response, binding.endpoint_identity)
        return replace(response, usage=usage)

    def _served_from_cache(self, cached: ModelResponse, template: ModelCallEntry) -> ModelResponse:
        """An answer from the result cache: no endpoint call, so nothing reserved and $0
        spent; a scope already at its cap still stops the agent, as before a real call."""
        self.env.budget.check_can_start()
        self.model_seq += 1
        self.outcome.cached_calls += 1
        exchange = replace(template.exchange, response=_reply(cached)) if template.exchange else None
        self.env.recorder.model_call(replace(
            template, status="ok", cached=True, tool_calls=len(cached.tool_calls), content=cached.content,
            finish_reason=cached.finish_reason, exchange=exchange,
        ))
        return cached

    def _flag_excess(self, usage: Usage, estimate: Estimate, asked: str | None, served: str | None) -> None:
        """Usage above the reservation already counts in every scope (no new call starts in a
        scope now over its cap); say so in the record: tokens beyond the worst case, or a price
        above it (a tier dearer than the one reserved served it: ``auto`` at priority, or flex at
        default where the profile declares no ``tier_fallback``)."""
        excess = max(usage.input_tokens - estimate.input_tokens, 0) + max(usage.output_tokens - estimate.output_tokens, 0)
        where = f"(step '{self.env.step_id}', call {self.model_seq})"
        if excess > 0:
            self.outcome.warnings.append(
                f"the endpoint reported {excess} tokens above the reserved worst case {where}; "
                "spend can pass a cap by what such calls report"
            )
        elif usage.cost_usd > estimate.cost_usd * (1 + 1e-9) + 1e-12:
            declare = f"declare it in the model profile's tier_fallback ({{{asked}: {served}}})" if asked else "ask for that tier in model.service_tier"
            self.outcome.warnings.append(
                f"the call cost ${usage.cost_usd:.6f}, above its reserved worst case ${estimate.cost_usd:.6f}, billed at "
                f"the service tier that served it ('{served}') {where}; {declare} so calls are reserved at it"
            )

    async def act_all(self, calls: tuple[ToolCall, ...], messages: list[Message], stuck: StuckDetector) -> AgentOutcome | None:
        """Run the tool calls of one response in order; an outcome when a terminating tool ended the run."""
        for index, call in enumerate(calls):
            termination = await self.act(call, messages, stuck)
            if termination is not None:
                for skipped in calls[index + 1 :]:  # every call gets a result, should the agent go on
                    messages.append(Message("tool", "not run: terminate was called first", tool_call_id=skipped.id, name=skipped.name))
                return await self.terminated(messages, termination)
        if self.agent.next_step_prompt:
            messages.append(Message("user", self.agent.next_step_prompt))
        return None

    async def act(self, call: ToolCall, messages: list[Message], stuck: StuckDetector) -> Termination | None:
        """Run one tool call and append its observation. Returns the verdict of a terminating tool."""
        env = self.env
        env.budget.take_tool_call()
        stuck.observe_call(call.name, call.arguments)
        started = time.monotonic()
        self.tool_seq += 1
        result: ToolResult | None = None
        cached = False
        status: CallStatus
        try:
            result, cached = await self.run_tool(call)
            content, status, valid = result.content, "ok", True
        except ToolFailure as failure:
            content, status, valid = f"error: {failure}", "error", not isinstance(failure, InvalidToolCall)
        whole = content  # before the model's truncation: the transcript keeps it (under its own limit)
        content = truncate_output(content, self.agent.context.max_tool_output_chars, self.prompts)
        stuck.observe_result(content, valid=valid)
        if result is not None:
            self.outcome.artifacts.extend(a for a in result.artifacts if a not in self.outcome.artifacts)
            if result.data is not None:
                self.outcome.data.append(result.data)
            self.outcome.sources.extend(result.sources)
        env.recorder.tool_call(
            ToolCallEntry(
                env.step_id, self.agent.name, self.tool_seq, call.name, call.arguments, status,
                time.monotonic() - started, content[:500], tuple(result.artifacts) if result else (), cached=cached,
                output=whole,
            )
        )
        messages.append(Message("tool", content, tool_call_id=call.id, name=call.name))
        self.observations.append(content)
        self.observed_arguments.append(call.arguments)
        if result is not None and env.tools.terminates(call.name):
            return _termination(result)
        return None

    async def run_tool(self, call: ToolCall) -> tuple[ToolResult, bool]:
        """Run one tool call, or answer it from the result cache when the tool is idempotent;
        ``True`` with a cached result. (The call counted against the caps either way.)"""
        env = self.env
        cache, settings = env.call_cache, env.tool_settings.get(call.name, {})
        if cache is not None and (hit := cache.tool_result(call.name, settings, call.arguments)) is not None:
            self.outcome.cached_calls += 1
            return hit, True
        try:
            async with within_deadline(env.budget):
                deadline = env.budget.deadline()
                result = await env.tools.call(call.name, call.arguments, deadline.at if deadline else None)
        except ToolFailure as failure:  # the model sees it: a replay must show it the same (runner.agent.replay)
            if cache is not None:
                cache.keep_tool_failure(call.name, settings, call.arguments, failure)
            raise
        if cache is not None:
            cache.keep_tool_result(call.name, settings, call.arguments, result)
        return result, False

    async def terminated(self, messages: list[Message], termination: Termination) -> AgentOutcome | None:
        """A terminating tool ended the run: its answer is checked like any other, unless the
        agent said it failed."""
        if termination.failed:
            error = f"the agent gave up (terminate with status 'failure'): {termination.answer[:300]}"
            return self.finish("failed", termination.answer, error=error, kind="gave_up")
        return await self.final_answer(messages, termination.answer)

    async def final_answer(self, messages: list[Message], answer: str | None) -> AgentOutcome | None:
        """Run the answer through the agent's checks, with bounded repair turns. ``None``: a
        check sent the agent back to work with its tools (the loop goes on)."""
        seen = Seen(
            self.goal, tuple(self.observations), tuple(self.observed_arguments), has_tools=bool(self.env.tools.schemas()),
            prompts_sent=tuple(self.prompts_sent),
        )
        for check in self.checks:
            rejection = await check.review(answer or "", seen)
            if rejection is not None:
                return await self.repair(messages, rejection, answer)
        value = parse_json_answer(answer, self.schema)[0] if self.schema is not None else answer
        return self.finish("completed", value)

    async def repair(self, messages: list[Message], rejection: Rejection, answer: str | None) -> AgentOutcome | None:
        """One more turn for the model to fix its answer, or fail (or fall back) when repairs are
        used up. A rejection that needs more evidence sends the agent back to its tools (``None``)."""
        if rejection.final or self.repairs >= self.agent.max_repairs:
            if rejection.kind in FIGURES_FALLBACK_KINDS and not rejection.final and self.agent.checks_fallback == "figures":
                return self.finish("completed", figures_fallback(self.goal, self.prompts))
            return self.finish("failed", answer, error=rejection.error, kind=rejection.kind)
        self.repairs += 1
        if self.agent.checks_repair == "resample" and messages[-1].role == "assistant" and not messages[-1].tool_calls:
            messages.pop()  # ask again without the rejected answer (whichever check refused it)
        else:
            messages.append(Message("user", rejection.request))
            self.prompts_sent.append(rejection.request)
        if rejection.back_to_tools:
            return None
        response = await self.think(messages, allow_tools=False)
        messages.append(Message("assistant", response.content))
        return await self.final_answer(messages, response.content)

    def finish(
        self, status: Status, output: Any, *, error: str | None = None, kind: str | None = None,
        scope: str | None = None, budget: str | None = None,
    ) -> AgentOutcome:
        outcome = self.outcome
        outcome.status, outcome.output, outcome.error, outcome.error_kind = status, output, error, kind
        outcome.error_scope, outcome.error_budget, outcome.usage = scope, budget, self.env.budget.spent
        outcome.degraded = list(self.models.degraded)
        return outcome


def fallback_binding(agent: str, route: FallbackRoute | None, schema: dict[str, Any] | None = None) -> ModelBinding | None:
    """``agent``'s fallback model as a binding (``schema``: the answer's, for a strict response format)."""
    if route is None:
        return None
    settings = call_settings(route.spec, route.profile, schema, route.prompt_cache_key)
    return ModelBinding(agent, route.model, route.pricer, route.model_id, settings, endpoint_identity=route.endpoint_identity)


def _exchange(request: ModelRequest) -> Exchange:
    """The request as the transcript keeps it (the response is added when it arrives)."""
    settings: dict[str, Any] = {"model": request.model, "tool_choice": request.tool_choice, "max_tokens": request.max_tokens}
    if request.temperature is not None:
        settings["temperature"] = request.temperature
    return Exchange(tuple(m.to_openai() for m in request.messages), request.tools, settings)


def _reply(response: ModelResponse) -> dict[str, Any]:
    return Message("assistant", response.content, tool_calls=response.tool_calls).to_openai() | {
        "finish_reason": response.finish_reason
    }


def _trusted_usage(response: ModelResponse, estimate: Estimate) -> Usage:
    """The response's token usage, or our estimate when the endpoint reported none (a missing
    or zero ``usage`` must not make calls free against a money cap)."""
    usage = response.usage
    input_tokens, output_tokens = max(usage.input_tokens, 0), max(usage.output_tokens, 0)
    if input_tokens == 0 and output_tokens == 0:
        calls = tuple((c.name, c.arguments) for c in response.tool_calls)
        return Usage(estimate.input_tokens, estimate_completion_tokens(response.content, calls))
    cached = min(max(usage.cached_input_tokens, 0), input_tokens)
    return Usage(
        input_tokens, output_tokens, cached, reasoning_tokens=min(max(usage.reasoning_tokens, 0), output_tokens),
        cache_write_tokens=min(max(usage.cache_write_tokens, 0), input_tokens - cached),
    )


def _termination(result: ToolResult) -> Termination:
    """The verdict of a terminating tool, from its validated result (``terminate`` returns
    ``{"answer", "status"}``; any other terminating tool's content is the answer)."""
    data = result.data if isinstance(result.data, dict) else {}
    answer = data.get("answer", result.content)
    return Termination(str(answer), failed=data.get("status") == "failure")
