"""Replaying the answers a run was given, and the tool results between them: a resumed run is
not billed twice for a call.

With ``runner batch --via batch-api`` every answer a provider batch returned is stored under
the run's id and the request's fingerprint (:class:`~runner.store.provider_answers.ProviderAnswers`).
A batch run live keeps each answer there too, as it arrives (``keep_live``). When the run is
resumed (after ``kill -9``, a failed attempt, or a command that returned while a batch was
out; live: after a budget, a batch cap, a provider's quota or an interrupt stopped the row part
way), its agents start over; each request they send again unchanged is answered from the
store, like a result-cache hit: no reservation, $0, recorded as cached. The spend was counted
when the answer first arrived (or settled against the call's reservation when it arrived
after the caller had gone).

Tool calls are replayed too (:class:`~runner.store.provider_tools.ProviderToolResults`): a
tool whose output changes from one run to the next (the time, a random number, a file it
appends to) would otherwise change the next request, which would be sent, and paid for,
again. Each result (or failure) is kept under a key naming its place in the conversation: the
fingerprint of the request whose answer asked for it, the tool, its arguments, and how many
times that same call came before in that answer. A replayed call does not run, so it has no
side effects; the workspace stays as the earlier attempt left it, which is what those calls
made it (see :func:`replayable_workspace` for when it is not, and the tools run again).
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from runner.agent.call_cache import CallAnswers
from runner.core.sources import Source
from runner.errors import InvalidToolCall, ToolFailure
from runner.model.answers import parse_answer
from runner.model.base import ModelRequest, ModelResponse
from runner.model.fingerprint import request_fingerprint
from runner.model.wire import InvalidResponse, completion_body
from runner.redact import redact_secrets
from runner.store.provider_answers import ProviderAnswers
from runner.store.provider_tools import ProviderToolResults
from runner.tools.base import ToolResult

ABSENT = "absent"
"""The workspace state of a run without a workspace directory."""


class ReplayCache:
    """The stored answers and tool results of one agent run, then ``inner`` (the result cache,
    if the run has one). One per agent run: its calls come in order, so the last request seen
    is the one whose answer asked for the tool calls that follow. ``replay``: what is stored is
    served (a resumed run); else only kept, for a later attempt. ``keep_live``: each answer
    from the endpoint is stored here (a batch run live; under a provider batch the rounds
    store the batch's answers as they collect them)."""

    def __init__(
        self,
        answers: ProviderAnswers,
        run_id: str,
        inner: CallAnswers | None = None,
        *,
        tools: ProviderToolResults | None = None,
        workspace: Path | None = None,
        secrets: Sequence[str] = (),
        replay: bool = True,
        keep_live: bool = False,
    ) -> None:
        self.answers, self.run_id, self.inner = answers, run_id, inner
        self.tools, self.workspace, self.secrets = tools, workspace, secrets
        self.replay, self.keep_live = replay, keep_live
        self._last = ""  # fingerprint of the last request sent
        self._seen: Counter[tuple[str, str, str]] = Counter()  # tool calls of that request's answer so far

    def model_response(self, request: ModelRequest, endpoint: str) -> ModelResponse | None:
        self._last = request_fingerprint(request)
        kept = self.answers.answer(self.run_id, self._last) if self.replay else None
        if kept is not None:
            try:
                return replace(parse_answer(kept.body), tariff="batch", recorded=kept.recorded)
            except InvalidResponse:
                pass  # never stored so (only answers that parsed are kept); ask again
        return self.inner.model_response(request, endpoint) if self.inner is not None else None

    def keep_response(self, request: ModelRequest, response: ModelResponse, endpoint: str) -> None:
        if not response.recorded:  # an unclaimed answer, served and now recorded: the run's own from here on
            self.answers.claim(self.run_id, request_fingerprint(request))
        elif self.keep_live:
            body = redact_secrets(completion_body(response), self.secrets)
            self.answers.answered(self.run_id, request_fingerprint(request), body)
        if self.inner is not None:
            self.inner.keep_response(request, response, endpoint)

    def tool_result(self, name: str, settings: dict[str, Any], arguments: str) -> ToolResult | None:
        """The kept result of this call at this place, if any (a kept failure is raised again)."""
        key = self._key(name, arguments)  # counted also when nothing is served: it places the calls that follow
        kept = self.tools.result(self.run_id, key) if self.tools is not None and self.replay else None
        if kept is None:
            return self.inner.tool_result(name, settings, arguments) if self.inner is not None else None
        if "failure" in kept:
            failure = InvalidToolCall if kept.get("invalid") else ToolFailure
            raise failure(str(kept["failure"]))
        sources = tuple(Source.from_dict(s) for s in kept.get("sources", ()))
        return ToolResult(str(kept.get("content", "")), list(kept.get("artifacts", ())), kept.get("data"), sources)

    def keep_tool_result(self, name: str, settings: dict[str, Any], arguments: str, result: ToolResult) -> None:
        value = {"content": result.content, "artifacts": list(result.artifacts), "data": result.data,
                 "sources": [s.as_dict() for s in result.sources]}  # fmt: skip
        self._keep(name, arguments, value)
        if self.inner is not None:
            self.inner.keep_tool_result(name, settings, arguments, result)

    def keep_tool_failure(self, name: str, settings: dict[str, Any], arguments: str, failure: ToolFailure) -> None:
        self._keep(name, arguments, {"failure": str(failure), "invalid": isinstance(failure, InvalidToolCall)})

    def _keep(self, name: str, arguments: str, value: dict[str, Any]) -> None:
        if self.tools is not None:
            state = workspace_state(self.workspace)
            self.tools.keep(
                self.run_id, self._key(name, arguments, advance=False), redact_secrets(value, self.secrets), state
            )

    def _key(self, name: str, arguments: str, *, advance: bool = True) -> str:
        """The call's place: the request whose answer asked for it, the call, and how many times
        the same call came before in that answer (counted when it is looked up, before it runs)."""
        seen = (self._last, name, arguments)
        if advance:
            self._seen[seen] += 1
        text = json.dumps([self._last, name, arguments, self._seen[seen]])
        return hashlib.sha256(text.encode()).hexdigest()


def workspace_state(workspace: Path | None) -> str:
    """A digest of the regular files in ``workspace`` (path, inode, size, times; no link followed):
    it is the same only while nothing in it changed. Hidden entries are not listed
    (:func:`runner.tools.written.take_snapshot`)."""
    if workspace is None or not workspace.is_dir():
        return ABSENT
    from runner.tools.written import take_snapshot

    files = sorted(take_snapshot(workspace).files.items())
    return hashlib.sha256(json.dumps(files).encode()).hexdigest()


def replayable_workspace(tools: ProviderToolResults, run_id: str, workspace: Path) -> bool | None:
    """Whether a resumed run's kept tool results may be replayed over ``workspace`` as it is now:
    ``True`` when it is exactly as the last kept call left it (so it holds what every kept call
    did, and the run keeps it), ``False`` when it is not (gone, changed since, or a tool was
    stopped half way: the kept results are forgotten and the tools run again on a fresh
    workspace), ``None`` when no result was kept."""
    last = tools.last_workspace(run_id)
    if last is None:
        return None
    if last == workspace_state(workspace):
        return True
    tools.forget(run_id)
    return False
