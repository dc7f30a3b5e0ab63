"""A run's trace: when tracing is on (:func:`runner.tracing.trace_settings`), the run's
events also become spans (:class:`runner.tracing.spans.SpanSink`). Off, nothing is imported."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from typing import Any
from urllib.parse import urlsplit

from runner.config.project import Project
from runner.config.specs import AgentSpec
from runner.core.providers import Provider
from runner.endpoints import DEFAULT_BASE_URL
from runner.model.factory import ModelPool
from runner.runs.options import RunOptions
from runner.tracing import MISSING_SDK, sdk_installed, trace_settings

PROVIDER_NAMES = {Provider.OPENAI: "openai", Provider.AZURE: "azure.ai.openai", Provider.ANTHROPIC: "anthropic",
                  Provider.LOCAL: "llama_cpp", Provider.FIXED: "_OTHER"}
"""``gen_ai.provider.name`` per endpoint kind: any OpenAI-compatible endpoint is called through
the OpenAI protocol (``server.address`` tells which one it is)."""


@contextmanager
def traced_run(project: Project, options: RunOptions, pool: ModelPool) -> Iterator[RunOptions]:
    """``options`` whose event sink also records spans, while the run lasts (unchanged when
    tracing is off). Spans left open by an exception are ended as errors."""
    settings = trace_settings(project.telemetry)
    if settings is None:
        yield options
        return
    if not sdk_installed():
        if options.events is not None:
            why = "an OTEL_EXPORTER_OTLP endpoint is set" if settings.endpoint is None else "a Telemetry document names an endpoint"
            options.events({"event": "notice", "message": MISSING_SDK.format(why=why)})
        yield options
        return
    from runner.tracing.provider import tracer_for
    from runner.tracing.spans import SpanSink

    sink = SpanSink(tracer_for(settings), options.events, ModelDescriber(project, options, pool))
    try:
        yield replace(options, events=sink)
    except BaseException as exc:
        sink.close(exc)
        raise
    sink.close()


class ModelDescriber:
    """The model attributes of an agent's spans: provider, model, server and request settings.
    Only the host and port of the endpoint are kept (never its user info or query)."""

    def __init__(self, project: Project, options: RunOptions, pool: ModelPool):
        self.project, self.options, self.pool = project, options, pool
        self.known: dict[str, dict[str, Any]] = {}

    def __call__(self, agent_name: str) -> Mapping[str, Any]:
        if agent_name not in self.known:
            agent = self._agent(agent_name)
            self.known[agent_name] = self._describe(agent) if agent is not None else {}
        return self.known[agent_name]

    def _agent(self, name: str) -> AgentSpec | None:
        found = self.project.agents.get(name)
        return found or next((a for a in self.project.agents.values() if a.name == name), None)

    def _describe(self, agent: AgentSpec) -> dict[str, Any]:
        options = self.options
        endpoint = self.pool.endpoint(agent.model, options.model_override, options.base_url_override, options.api_key)
        found: dict[str, Any] = {
            "gen_ai.provider.name": PROVIDER_NAMES.get(endpoint.provider, "_OTHER"),
            "gen_ai.request.model": endpoint.model_id,
            "gen_ai.request.max_tokens": agent.model.max_tokens,
        }
        if agent.model.temperature is not None:
            found["gen_ai.request.temperature"] = float(agent.model.temperature)
        if endpoint.provider.remote:
            found.update(_server(endpoint.base_url or DEFAULT_BASE_URL))
        return found


def _server(url: str) -> dict[str, Any]:
    parts = urlsplit(url)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return {}
    return {"server.address": parts.hostname or "", "server.port": port} if parts.hostname else {}
