"""The openai SDK adapter: any OpenAI-compatible Chat Completions endpoint as a ChatModel.

The SDK's own retries are switched off (``max_retries=0``) and :class:`RetryPolicy`
applies ours, so that waits are bounded, observable (``on_retry``) and testable (an
injectable ``sleep``), and so a long ``Retry-After`` fails fast as ``rate_limited``.
Every failure leaves as a :class:`~runner.errors.ModelError` whose message is redacted
and whose exception chain holds no SDK object (they carry the ``Authorization`` header).
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
from collections.abc import Mapping
from typing import Any

import openai

from runner import untrusted_json
from runner.endpoints import safe_url
from runner.errors import ModelError
from runner.model.base import AttemptHook, ModelRequest, ModelResponse
from runner.model.faults import Fault, RetryPolicy
from runner.model.openai_faults import ENDPOINT_EXCEPTIONS, classify
from runner.model.response_cap import capped_http_client
from runner.model.retrying import OnRetry, Sleep, complete_with_retries
from runner.model.sdk_faults import header_secrets
from runner.model.wire import InvalidResponse, StreamAccumulator, parse_completion, request_body

try:  # openai >= 3 ships its own httpx fork
    from httpx2 import Response as _HttpResponse
except ImportError:  # pragma: no cover - older SDKs
    from httpx import Response as _HttpResponse  # type: ignore[assignment,no-redef]

"""``on_retry(kind, attempt, wait_seconds)``: called before each wait; ``attempt`` is 1-based."""


class OpenAIChatModel:
    """A :class:`~runner.model.base.ChatModel` over ``openai.AsyncOpenAI``.

    ``api_key`` is the value the caller read from the environment variable named in the
    YAML; when ``None`` the SDK falls back to ``OPENAI_API_KEY`` (and ``base_url`` to
    ``OPENAI_BASE_URL``). ``timeout_seconds`` bounds each attempt. ``max_retries``
    overrides ``retry_policy.max_retries``. With ``stream=True`` answers are streamed
    and accumulated (usage via ``stream_options.include_usage``); the result is the same
    :class:`ModelResponse`. ``azure=(deployment, api_version)``: an Azure OpenAI resource at
    ``base_url``, through the SDK's Azure client.
    """

    supports_tools = True

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout_seconds: float = 120.0,
        max_retries: int | None = None,
        retry_policy: RetryPolicy | None = None,
        default_headers: Mapping[str, str] | None = None,
        stream: bool = False,
        azure: tuple[str, str] | None = None,
        sleep: Sleep = asyncio.sleep,
        on_retry: OnRetry | None = None,
        rng: random.Random | None = None,
        name: str | None = None,
    ) -> None:
        self.model = model
        self.name = name or model
        self.stream = stream
        self.retry_policy = retry_policy or RetryPolicy()
        if max_retries is not None:
            self.retry_policy = dataclasses.replace(self.retry_policy, max_retries=max_retries)
        self._sleep = sleep
        self._on_retry = on_retry
        self._rng = rng or random.Random()
        headers = dict(default_headers or {})
        self._timeout = timeout_seconds
        self._client = _make_client(base_url, api_key, timeout_seconds, headers, azure)
        self._secrets = (self._client.api_key, *header_secrets(headers))

    async def complete(self, request: ModelRequest, attempts: AttemptHook | None = None) -> ModelResponse:
        """Call the endpoint, retrying per the policy; ``latency_seconds`` is the successful attempt's.
        ``attempts`` hears of each failed attempt before its retry (and may stop the retries)."""
        body = wire_body(request, self.model)
        return await complete_with_retries(
            lambda: self._attempt(body), self.retry_policy, rng=self._rng, sleep=self._sleep,
            on_retry=self._on_retry, attempts=attempts,
        )  # fmt: skip

    async def aclose(self) -> None:
        """Close the HTTP connection pool."""
        await self._client.close()

    def __repr__(self) -> str:
        return f"OpenAIChatModel(model={self.model!r}, base_url={safe_url(str(self._client.base_url))!r})"

    def __getstate__(self) -> dict[str, Any]:
        raise TypeError("OpenAIChatModel holds credentials and cannot be serialised")

    async def _attempt(self, body: dict[str, Any]) -> ModelResponse | Fault:
        """One HTTP call; endpoint failures come back classified, our own bugs propagate.

        ``timeout_seconds`` bounds the whole attempt, not only each read: an endpoint that
        drips its answer a byte at a time is cut off like one that does not answer."""
        try:
            async with asyncio.timeout(self._timeout):
                if self.stream:
                    return await self._streamed(body)
                # The SDK's documented request for arbitrary endpoints, with the raw response:
                # same transport, auth and error classes, but it skips the SDK's per-call walk
                # of the typed request params and its pydantic response models (most of the
                # client CPU per call); the body is parsed once, here.
                response = await self._client.post("/chat/completions", body=body, cast_to=_HttpResponse)
                return parse_completion(_json_body(response))
        except TimeoutError:
            return Fault("timeout", f"no complete answer within {self._timeout:g} s (the model's timeout_seconds)")
        except ENDPOINT_EXCEPTIONS as exc:
            return classify(exc, self._secrets)

    async def _streamed(self, body: dict[str, Any]) -> ModelResponse:
        accumulator = StreamAccumulator()
        stream = await self._client.chat.completions.create(**body, stream=True, stream_options={"include_usage": True})
        async with stream:
            async for chunk in stream:
                accumulator.add(_as_dict(chunk))
        return accumulator.result()


def wire_body(request: ModelRequest, default_model: str) -> dict[str, Any]:
    """The body sent for ``request``: its model, else ``default_model`` (also a provider batch
    line's body, so both paths send the profile's tokens field and parameters)."""
    body = request_body(request)
    body["model"] = request.model or default_model
    return body


def _make_client(
    base_url: str | None, api_key: str | None, timeout_seconds: float, headers: dict[str, str],
    azure: tuple[str, str] | None = None,
) -> openai.AsyncOpenAI:
    if azure is not None:
        return _azure_client(base_url, api_key, timeout_seconds, headers, *azure)
    try:
        return openai.AsyncOpenAI(
            api_key=api_key,
            base_url=base_url,
            timeout=timeout_seconds,
            max_retries=0,
            default_headers=headers,
            http_client=capped_http_client(),  # an endless body ends the call, not the process
        )
    except openai.OpenAIError:
        pass
    # Raised outside the except block so no SDK exception is chained to ours.
    raise ModelError(
        "auth",
        "no API key: set the environment variable named by the agent's model api_key_env, or OPENAI_API_KEY",
    )


def _azure_client(
    endpoint: str | None, api_key: str | None, timeout_seconds: float, headers: dict[str, str], deployment: str, api_version: str
) -> openai.AsyncOpenAI:
    """The SDK's Azure client: calls go to ``{endpoint}/openai/deployments/{deployment}/...?api-version=...``
    with the key in the ``api-key`` header (never an Azure AD token read from the environment)."""
    if not api_key or not endpoint:
        raise ModelError("auth", "no API key or endpoint: set AZURE_OPENAI_API_KEY and AZURE_OPENAI_ENDPOINT (or model.base_url)")
    return openai.AsyncAzureOpenAI(
        azure_endpoint=endpoint, azure_deployment=deployment, api_version=api_version, api_key=api_key, timeout=timeout_seconds,
        max_retries=0, default_headers=headers, http_client=capped_http_client(),
    )  # fmt: skip


def _json_body(response: Any) -> dict[str, Any]:
    content_type = response.headers.get("content-type", "")
    if "json" not in content_type:
        raise InvalidResponse(f"expected a JSON chat completion, got content-type {content_type or 'none'!r}")
    try:
        data = untrusted_json.loads(response.content)
    except untrusted_json.JsonTooDeep as exc:
        raise InvalidResponse(f"the response body is {exc}") from None
    if not isinstance(data, dict):
        raise InvalidResponse(f"expected a JSON object, got {type(data).__name__}")
    return data


def _as_dict(obj: object) -> dict[str, Any]:
    # Without a JSON content type the SDK hands back the body as text.
    if not hasattr(obj, "to_dict"):
        raise InvalidResponse(f"expected a JSON chat completion, got {type(obj).__name__}")
    data: dict[str, Any] = obj.to_dict(warnings=False)
    return data
