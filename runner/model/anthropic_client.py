"""The anthropic SDK adapter: Anthropic's native Messages API as a ChatModel.

Like the openai adapter (:mod:`runner.model.openai_client`): the SDK's own retries are off
and :class:`~runner.model.faults.RetryPolicy` applies ours (429 ``rate_limit_error``, 529
``overloaded_error`` and other 5xx are retried; a 400 ``invalid_request_error`` fails at once
with the provider's message); every failure leaves as a redacted
:class:`~runner.errors.ModelError` with no SDK object chained. The key goes in the
``x-api-key`` header the SDK sends, to Anthropic's endpoint only (:mod:`runner.endpoints`).
Bodies are built by :mod:`runner.model.anthropic_wire` (system prompt and tools as a cached
prefix, ``max_tokens`` always sent).
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
from collections.abc import Mapping
from typing import Any

import anthropic

from runner import untrusted_json
from runner.endpoints import safe_url
from runner.errors import ModelError
from runner.model.anthropic_wire import parse_message, request_body
from runner.model.base import AttemptHook, ModelRequest, ModelResponse
from runner.model.faults import Fault, RetryPolicy
from runner.model.response_cap import MAX_RESPONSE_BYTES, capped_anthropic_http_client
from runner.model.retrying import OnRetry, Sleep, complete_with_retries
from runner.model.sdk_faults import classify_sdk, header_secrets
from runner.model.wire import InvalidResponse

try:  # the SDK's httpx fork (as the openai SDK's)
    from httpx2 import Response as HttpResponse
except ImportError:  # pragma: no cover - older SDKs
    from httpx import Response as HttpResponse  # type: ignore[assignment,no-redef]

ANTHROPIC_BASE_URL = "https://api.anthropic.com"
"""Where the anthropic SDK sends calls when no base URL is configured (paths start at /v1)."""

"""``on_retry(kind, attempt, wait_seconds)``: called before each wait; ``attempt`` is 1-based."""
ENDPOINT_EXCEPTIONS: tuple[type[Exception], ...] = (anthropic.AnthropicError, ValueError, UnicodeDecodeError)
"""What a call through the SDK may raise that is the endpoint's fault (``ValueError`` covers
a body that is not JSON and :class:`InvalidResponse`)."""


class AnthropicChatModel:
    """A :class:`~runner.model.base.ChatModel` over ``anthropic.AsyncAnthropic``; ``api_key``
    is the value the caller read from the variable the agent names (or ANTHROPIC_API_KEY)."""

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
        sleep: Sleep = asyncio.sleep,
        on_retry: OnRetry | None = None,
        rng: random.Random | None = None,
        name: str | None = None,
    ) -> None:
        self.model = model
        self.name = name or model
        self.retry_policy = retry_policy or RetryPolicy()
        if max_retries is not None:
            self.retry_policy = dataclasses.replace(self.retry_policy, max_retries=max_retries)
        self._sleep, self._on_retry, self._rng = sleep, on_retry, rng or random.Random()
        self._timeout = timeout_seconds
        headers = dict(default_headers or {})
        self._client = make_client(base_url, api_key, timeout_seconds, max_retries=0, headers=headers)
        self._secrets = (self._client.api_key, *header_secrets(headers))

    async def complete(self, request: ModelRequest, attempts: AttemptHook | None = None) -> ModelResponse:
        """Call the endpoint, retrying per the policy (see :meth:`OpenAIChatModel.complete`)."""
        body = request_body(request, self.model)
        return await complete_with_retries(
            lambda: self._attempt(body), self.retry_policy, rng=self._rng, sleep=self._sleep,
            on_retry=self._on_retry, attempts=attempts,
        )  # fmt: skip

    async def aclose(self) -> None:
        """Close the HTTP connection pool."""
        await self._client.close()

    def __repr__(self) -> str:
        return f"AnthropicChatModel(model={self.model!r}, base_url={safe_url(str(self._client.base_url))!r})"

    def __getstate__(self) -> dict[str, Any]:
        raise TypeError("AnthropicChatModel holds credentials and cannot be serialised")

    async def _attempt(self, body: dict[str, Any]) -> ModelResponse | Fault:
        """One HTTP call, bounded as a whole by the timeout; endpoint failures come back classified."""
        try:
            async with asyncio.timeout(self._timeout):
                # the raw response: the SDK's transport, auth and errors, our own parsing
                response = await self._client.post("/v1/messages", body=body, cast_to=HttpResponse)
                return parse_message(json_body(response))
        except TimeoutError:
            return Fault("timeout", f"no complete answer within {self._timeout:g} s (the model's timeout_seconds)")
        except ENDPOINT_EXCEPTIONS as exc:
            return classify(exc, self._secrets)


def classify(exc: Exception, secrets: tuple[str | None, ...]) -> Fault:
    """What the anthropic SDK raised as a :class:`Fault` (429/529/5xx retried, 400 not)."""
    if isinstance(exc, ValueError) and not isinstance(exc, InvalidResponse):
        return Fault("invalid_response", f"the response body is not valid JSON ({type(exc).__name__})")
    return classify_sdk(exc, secrets, anthropic, anthropic.AnthropicError)


def make_client(
    base_url: str | None, api_key: str | None, timeout_seconds: float, *, max_retries: int, headers: Mapping[str, str] | None = None,
    max_response_bytes: int = MAX_RESPONSE_BYTES,
) -> anthropic.AsyncAnthropic:
    """The SDK client. The key goes in ``x-api-key``, as Anthropic documents it (newer SDKs send
    ``Authorization: Bearer`` instead: omitted); ``anthropic-version`` is the SDK's. The key is
    always given: the SDK would otherwise read ANTHROPIC_API_KEY (or a credentials file) itself,
    whatever the endpoint. ``headers`` (``model.extra_headers``, e.g. ``anthropic-beta``) go with
    every call; the key's own headers are set after them (``runner validate`` refuses a key
    header in them anyway: :mod:`runner.config.profile_checks`)."""
    if api_key:
        return anthropic.AsyncAnthropic(
            api_key=api_key, base_url=base_url or ANTHROPIC_BASE_URL, timeout=timeout_seconds, max_retries=max_retries,
            default_headers={**(headers or {}), "x-api-key": api_key, "Authorization": anthropic.Omit()},  # type: ignore[dict-item]
            http_client=capped_anthropic_http_client(max_response_bytes),
        )
    raise ModelError("auth", "no API key: set ANTHROPIC_API_KEY, or the environment variable named by the agent's model api_key_env")


def json_body(response: Any) -> dict[str, Any]:
    """The decoded JSON object of a raw response; :class:`InvalidResponse` otherwise."""
    content_type = response.headers.get("content-type", "")
    if "json" not in content_type:
        raise InvalidResponse(f"expected a JSON message, got content-type {content_type or 'none'!r}")
    try:
        data = untrusted_json.loads(response.content)
    except untrusted_json.JsonTooDeep as exc:
        raise InvalidResponse(f"the response body is {exc}") from None
    if not isinstance(data, dict):
        raise InvalidResponse(f"expected a JSON object, got {type(data).__name__}")
    return data
