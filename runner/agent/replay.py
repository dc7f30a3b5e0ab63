"""Replaying a provider batch's answers: a resumed run is not billed twice for a call.

With ``runner batch --via batch-api`` every answer a provider batch returned is stored under
the run's id and the request's fingerprint (:class:`~runner.store.provider_answers.ProviderAnswers`).
When the run is resumed (after ``kill -9``, a failed attempt, or a command that returned
while a batch was out), its agents start over; each request they send again unchanged is
answered from the store, like a result-cache hit: no reservation, $0, recorded as cached.
The spend was counted when the answer first arrived (or settled against the call's
reservation when it arrived after the caller had gone). Tool calls are not replayed here: a
tool runs again (its own result cache applies), so a deterministic tool gives the same
result, and the next request is the same request.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from runner.agent.call_cache import CallAnswers
from runner.model.base import ModelRequest, ModelResponse
from runner.model.fingerprint import request_fingerprint
from runner.model.wire import InvalidResponse, parse_completion
from runner.store.provider_answers import ProviderAnswers
from runner.tools.base import ToolResult


@dataclass(frozen=True)
class ReplayCache:
    """The stored answers of one run, then ``inner`` (the result cache, if the run has one)."""

    answers: ProviderAnswers
    run_id: str
    inner: CallAnswers | None = None

    def model_response(self, request: ModelRequest) -> ModelResponse | None:
        body = self.answers.answer(self.run_id, request_fingerprint(request))
        if body is not None:
            try:
                return replace(parse_completion(body), tariff="batch")
            except InvalidResponse:
                pass  # never stored so (only answers that parsed are kept); ask again
        return self.inner.model_response(request) if self.inner is not None else None

    def keep_response(self, request: ModelRequest, response: ModelResponse) -> None:
        if self.inner is not None:
            self.inner.keep_response(request, response)

    def tool_result(self, name: str, settings: dict[str, Any], arguments: str) -> ToolResult | None:
        return self.inner.tool_result(name, settings, arguments) if self.inner is not None else None

    def keep_tool_result(self, name: str, settings: dict[str, Any], arguments: str, result: ToolResult) -> None:
        if self.inner is not None:
            self.inner.keep_tool_result(name, settings, arguments, result)
