"""ScriptedModel: an in-process ChatModel for fast tests of agents, shipped for users too.

It answers from the same rules as the scripted HTTP server (:mod:`runner.model.script_rules`)
and builds each answer as the same Chat Completions JSON, parsed by the same code as a
real endpoint's. No HTTP and no retries: a scripted fault raises the
:class:`~runner.errors.ModelError` the real client raises once its retries are spent::

    model = ScriptedModel.sequence(
        {"tool_calls": [{"name": "search", "arguments": {"q": "Paris"}}]},
        "Paris is the capital of France.",
    )
    model = ScriptedModel({"rules": [{"when": {"last_role": "tool"}, "reply": "Done."}]})
    model = ScriptedModel(lambda request: f"you said {request.messages[-1].content}")

A function receives the :class:`ModelRequest` and returns a :class:`ModelResponse`, a
reply mapping, a string (the content), or an awaitable of one of these.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import itertools
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeAlias

from runner.errors import ModelError
from runner.model.base import AttemptHook, ModelRequest, ModelResponse
from runner.model.faults import kind_for_status
from runner.model.replies import Reply
from runner.model.script_rules import DEFAULT_FALLBACK, NoRuleMatched, Script
from runner.model.wire import parse_completion, request_body

FunctionResult: TypeAlias = ModelResponse | Reply | Mapping[str, Any] | str
ModelFunction: TypeAlias = Callable[[ModelRequest], FunctionResult | Awaitable[FunctionResult]]
Sleep: TypeAlias = Callable[[float], Awaitable[None]]


class ScriptedModel:
    """A :class:`~runner.model.base.ChatModel` answering from a script or a function.

    ``requests`` holds every request received, in order, for assertions.
    ``latency_seconds`` in a reply is awaited through ``sleep`` (injectable);
    ``hang_seconds`` raises ``ModelError('timeout')`` at once.
    """

    supports_tools = True

    def __init__(
        self,
        script: Script | Mapping[str, Any] | list[Any] | ModelFunction | None = None,
        *,
        name: str = "scripted",
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self.name = name
        self.requests: list[ModelRequest] = []
        self._function: ModelFunction | None = None
        self.script: Script | None = None
        if callable(script) and not isinstance(script, Script):
            self._function = script
        else:
            self.script = script if isinstance(script, Script) else Script.from_obj(script or [])
        self._sleep = sleep
        self._serials = itertools.count(1)

    @classmethod
    def sequence(
        cls, *replies: object, fallback: Reply | None = DEFAULT_FALLBACK, name: str = "scripted"
    ) -> ScriptedModel:
        """Answer with ``replies`` once each, in order, then with ``fallback``."""
        return cls(Script.sequence(*replies, fallback=fallback), name=name)

    async def complete(self, request: ModelRequest, attempts: AttemptHook | None = None) -> ModelResponse:
        """Answer ``request``; scripted faults raise :class:`ModelError`."""
        self.requests.append(request)
        body = request_body(request)
        reply, serial = await self._choose(request, body)
        if isinstance(reply, ModelResponse):
            return reply
        if reply.hang_seconds:
            raise ModelError("timeout", f"the request timed out (scripted hang of {reply.hang_seconds:g} s)")
        if reply.latency_seconds:
            await self._sleep(reply.latency_seconds)
        if reply.fault is not None:
            retry_after = reply.fault.retry_after
            note = f" (Retry-After: {retry_after:g} s)" if retry_after is not None else ""
            raise ModelError(kind_for_status(reply.fault.status), f"HTTP {reply.fault.status}: scripted fault{note}")
        if reply.invalid_json:
            raise ModelError("invalid_response", "the response body is not valid JSON (scripted)")
        tokenizer = self.script.tokenizer if self.script is not None else "estimate"
        response = parse_completion(reply.completion(body, serial, tokenizer))
        return dataclasses.replace(response, latency_seconds=reply.latency_seconds)

    async def aclose(self) -> None:
        """Nothing to release."""

    def __repr__(self) -> str:
        source = "function" if self._function is not None else f"{len(self.script.rules) if self.script else 0} rules"
        return f"ScriptedModel(name={self.name!r}, {source})"

    async def _choose(self, request: ModelRequest, body: dict[str, Any]) -> tuple[ModelResponse | Reply, int]:
        if self._function is None:
            assert self.script is not None
            try:
                match = self.script.next(body)
            except NoRuleMatched as exc:
                raise ModelError("bad_request", str(exc)) from None
            return match.reply, match.serial
        result = self._function(request)
        if inspect.isawaitable(result):
            result = await result
        serial = next(self._serials)
        if isinstance(result, ModelResponse | Reply):
            return result, serial
        return Reply.from_obj(result, "ScriptedModel function result"), serial
