"""A cap on what a model endpoint may send back, enforced while the body is read.

The SDK reads a whole response into memory before anything looks at it; an endpoint that
answers with an endless (or merely enormous) body would grow the process until the
machine kills it. The HTTP client made here wraps every response's byte stream so that
reading stops with :class:`ResponseTooLarge` (an ``invalid_response`` fault, like any
other unusable answer) once :data:`MAX_RESPONSE_BYTES` have arrived. No completion comes
near it: ``max_tokens`` of text is a few megabytes at most.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from typing import Any

from runner.model.wire import InvalidResponse

MAX_RESPONSE_BYTES = 16 << 20


class ResponseTooLarge(InvalidResponse):
    """The endpoint sent more than :data:`MAX_RESPONSE_BYTES` in one response."""

    def __init__(self) -> None:
        super().__init__(f"the response is larger than {MAX_RESPONSE_BYTES >> 20} MiB; no chat completion is that large")


@functools.cache
def _capped_stream_class() -> Any:
    """A response byte stream of the SDK's HTTP library that stops after ``limit`` bytes."""
    try:
        import httpx2 as httpx
    except ImportError:  # the same API under its original name
        import httpx  # type: ignore[no-redef]

    class CappedStream(httpx.AsyncByteStream):  # type: ignore[misc,name-defined]
        def __init__(self, inner: Any, limit: int):
            self.inner, self.limit = inner, limit

        async def __aiter__(self) -> AsyncIterator[bytes]:
            seen = 0
            async for chunk in self.inner:
                seen += len(chunk)
                if seen > self.limit:
                    raise ResponseTooLarge()
                yield chunk

        async def aclose(self) -> None:
            await self.inner.aclose()

    return CappedStream


async def _cap(response: Any) -> None:
    response.stream = _capped_stream_class()(response.stream, MAX_RESPONSE_BYTES)


def capped_http_client() -> Any:
    """The openai SDK's default async HTTP client, with every response's body capped."""
    import openai

    return openai.DefaultAsyncHttpxClient(event_hooks={"response": [_cap]})


def capped_anthropic_http_client() -> Any:
    """The anthropic SDK's default async HTTP client (the same transport), every body capped."""
    import anthropic

    return anthropic.DefaultAsyncHttpxClient(event_hooks={"response": [_cap]})
