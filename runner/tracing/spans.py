"""One run's events as spans (GenAI semantic conventions, development status).

::

    invoke_workflow {task}          the run (INTERNAL)
      invoke_agent {agent}          an agent step: planner, executor or synthesis too (INTERNAL)
        chat {model}                one model call attempt (CLIENT)
        execute_tool {tool}         one tool call (INTERNAL)
      execute_tool {tool}           a tool step of a pipeline (INTERNAL)

The sink sits in front of the run's event sink: each event is turned into span work, then
passed on unchanged. Model and tool calls are reported when they end, with their duration,
so their spans are made with explicit start and end times.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.util.types import AttributeValue

from runner.core.ports import EventSink

Attributes = dict[str, AttributeValue]
ModelAttributes = Callable[[str], Mapping[str, AttributeValue]]
"""``agent name -> {gen_ai.provider.name, gen_ai.request.model, server.address, ...}``."""


class SpanSink:
    """An :class:`~runner.core.ports.EventSink` that records one run as spans."""

    def __init__(self, tracer: trace.Tracer, inner: EventSink | None, model_attributes: ModelAttributes):
        self.tracer, self.inner, self.model_attributes = tracer, inner, model_attributes
        self.run: Span | None = None
        self.steps: dict[str, Span] = {}
        self.handlers: dict[str, Callable[[dict[str, Any]], None]] = {
            "run_started": self._run_started, "run_finished": self._run_finished,
            "step_started": self._step_started, "step_finished": self._step_finished,
            "model_call": self._model_call, "tool_call": self._tool_call, "plan": self._plan,
        }

    def __call__(self, event: dict[str, Any]) -> None:
        handler = self.handlers.get(event.get("event", ""))
        if handler is not None:
            handler(event)
        if self.inner is not None:
            self.inner(event)

    def close(self, error: BaseException | None = None) -> None:
        """End whatever is still open (the run stopped on an exception), marked as an error."""
        for span in [*self.steps.values(), *([self.run] if self.run else [])]:
            if error is not None:
                span.set_status(Status(StatusCode.ERROR, type(error).__name__))
                span.set_attribute("error.type", type(error).__name__)
            span.end()
        self.steps.clear()
        self.run = None

    # -- the run --------------------------------------------------------------------

    def _run_started(self, event: dict[str, Any]) -> None:
        task = str(event.get("task", ""))
        attributes: Attributes = {
            "gen_ai.operation.name": "invoke_workflow", "gen_ai.workflow.name": task,
            "runner.run.id": str(event.get("run_id", "")), "runner.run.attempt": int(event.get("attempt") or 1),
        }
        if event.get("resumed_steps"):
            attributes["runner.run.resumed_steps"] = [str(s) for s in event["resumed_steps"]]
        self.run = self.tracer.start_span(f"invoke_workflow {task}", kind=SpanKind.INTERNAL, attributes=attributes)

    def _run_finished(self, event: dict[str, Any]) -> None:
        if self.run is None:
            return
        span, self.run = self.run, None
        span.set_attributes(_usage(event, "runner.usage."))
        span.set_attribute("runner.run.status", str(event.get("status")))
        _end(span, event.get("status"), event.get("error_kind"))

    def _plan(self, event: dict[str, Any]) -> None:
        if self.run is not None:
            problems = event.get("problems") or []
            self.run.add_event("plan", {"runner.plan.attempt": int(event.get("attempt") or 0),
                                        "runner.plan.valid": bool(event.get("valid")), "runner.plan.problems": len(problems)})

    # -- steps ----------------------------------------------------------------------

    def _step_started(self, event: dict[str, Any]) -> None:
        step = str(event.get("step", ""))
        parent = self._context(None)
        if event.get("kind") == "tool":
            tool = str(event.get("tool", ""))
            attributes: Attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool,
                                      "gen_ai.tool.type": "function", "runner.step.id": step}
            name, kind = f"execute_tool {tool}", SpanKind.INTERNAL
        else:
            agent = str(event.get("agent", ""))
            attributes = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": agent,
                          "runner.step.id": step, "runner.step.kind": str(event.get("kind", "agent"))}
            attributes.update(_agent_level(self.model_attributes(agent)))
            name, kind = f"invoke_agent {agent}", SpanKind.INTERNAL
        self.steps[step] = self.tracer.start_span(name, context=parent, kind=kind, attributes=attributes)

    def _step_finished(self, event: dict[str, Any]) -> None:
        span = self.steps.pop(str(event.get("step", "")), None)
        if span is None:
            return
        span.set_attribute("runner.step.status", str(event.get("status")))
        span.set_attribute("runner.usage.cost_usd", float(event.get("cost_usd") or 0.0))
        _end(span, event.get("status"), event.get("error_kind"))

    # -- calls ----------------------------------------------------------------------

    def _model_call(self, event: dict[str, Any]) -> None:
        agent, model = str(event.get("agent", "")), str(event.get("model", ""))
        attributes: Attributes = {"gen_ai.operation.name": "chat", **self.model_attributes(agent), "gen_ai.request.model": model}
        attributes.update(_usage(event, "gen_ai.usage.", gen_ai=True))
        if event.get("finish_reason"):
            attributes["gen_ai.response.finish_reasons"] = [str(event["finish_reason"])]
        attributes["runner.usage.cost_usd"] = float(event.get("cost_usd") or 0.0)
        start, end = _interval(event.get("latency_seconds"))
        span = self.tracer.start_span(
            f"chat {model}", context=self._context(event.get("step_id")), kind=SpanKind.CLIENT,
            attributes=attributes, start_time=start,
        )
        if event.get("status") == "error":
            _fail(span, str(event.get("error_kind") or "_OTHER"))
        span.end(end_time=end)

    def _tool_call(self, event: dict[str, Any]) -> None:
        name = str(event.get("name", ""))
        attributes: Attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
                                  "gen_ai.tool.type": "function", "runner.tool_call.seq": int(event.get("seq") or 0)}
        start, end = _interval(event.get("duration_seconds"))
        span = self.tracer.start_span(
            f"execute_tool {name}", context=self._context(event.get("step_id")), kind=SpanKind.INTERNAL,
            attributes=attributes, start_time=start,
        )
        if event.get("status") == "error":
            _fail(span, "tool_error")
        span.end(end_time=end)

    def _context(self, step_id: object) -> otel_context.Context | None:
        """The parent for a new span: its step's span, else the run's, else the caller's context."""
        parent = self.steps.get(str(step_id)) if step_id is not None else None
        parent = parent or self.run
        return trace.set_span_in_context(parent) if parent is not None else None


def _agent_level(model: Mapping[str, AttributeValue]) -> Attributes:
    """What an agent span carries of its model (the provider is required, the rest helps sampling)."""
    keys = ("gen_ai.provider.name", "gen_ai.request.model", "server.address", "server.port")
    return {k: model[k] for k in keys if k in model}


def _usage(event: Mapping[str, Any], prefix: str, *, gen_ai: bool = False) -> Attributes:
    """Token counts (and, outside ``gen_ai.usage``, money) as attributes."""
    found: Attributes = {
        f"{prefix}input_tokens": int(event.get("input_tokens") or 0),
        f"{prefix}output_tokens": int(event.get("output_tokens") or 0),
    }
    cached = int(event.get("cached_input_tokens") or 0)
    if gen_ai:
        if cached:
            found["gen_ai.usage.cache_read.input_tokens"] = cached
        return found
    found[f"{prefix}cached_input_tokens"] = cached
    found[f"{prefix}cost_usd"] = float(event.get("cost_usd") or 0.0)
    return found


def _interval(seconds: object) -> tuple[int, int]:
    """(start, end) in epoch nanoseconds for something that just took ``seconds``."""
    end = time.time_ns()
    took = seconds if isinstance(seconds, int | float) and seconds > 0 else 0
    return end - int(took * 1e9), end


def _end(span: Span, status: object, error_kind: object) -> None:
    if status != "completed":
        _fail(span, str(error_kind or status or "_OTHER"))
    span.end()


def _fail(span: Span, error_type: str) -> None:
    span.set_status(Status(StatusCode.ERROR))
    span.set_attribute("error.type", error_type)
