"""A cap on what a model endpoint may send back, enforced while the body is read.

The SDK reads a whole response into memory before anything looks at it; an endpoint that
answers with an endless (or merely enormous) body would grow the process until the
machine kills it. The HTTP client made here wraps every response's byte stream so that
reading stops with :class:`ResponseTooLarge` (an ``invalid_response`` fault, like any
other unusable answer) once :data:`MAX_RESPONSE_BYTES` have arrived. No completion comes
near it: ``max_tokens`` of text is a few megabytes at most. A provider batch's results (a
Message Batch's JSONL, an OpenAI batch's output file) hold a completion per request, up to
100,000 of them: their clients take :data:`MAX_BATCH_RESULTS_BYTES` instead.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from typing import Any

from runner.model.wire import InvalidResponse

MAX_RESPONSE_BYTES = 16 << 20
"""What one live call's answer may be."""
MAX_BATCH_RESULTS_BYTES = 8 << 30
"""What one provider batch's results may be: 100,000 answers of up to about 80 KiB each (a long
completion with its JSON envelope), well past what a batch of the shipped tasks returns
(120,000 triage rows: about 60 MB per 100,000)."""


class ResponseTooLarge(InvalidResponse):
    """The endpoint sent more than the cap of its client in one response."""

    def __init__(self, limit: int = MAX_RESPONSE_BYTES) -> None:
        what = "no chat completion is that large" if limit == MAX_RESPONSE_BYTES else "no provider batch's results are that large"
        super().__init__(f"the response is larger than {limit >> 20} MiB; {what}")


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
                    raise ResponseTooLarge(self.limit)
                yield chunk

        async def aclose(self) -> None:
            await self.inner.aclose()

    return CappedStream


def _capping(limit: int) -> Any:
    """The response hook that caps every body at ``limit`` bytes."""

    async def cap(response: Any) -> None:
        response.stream = _capped_stream_class()(response.stream, limit)

    return cap


def capped_http_client(limit: int = MAX_RESPONSE_BYTES) -> Any:
    """The openai SDK's default async HTTP client, with every response's body capped at ``limit``."""
    import openai

    return openai.DefaultAsyncHttpxClient(event_hooks={"response": [_capping(limit)]})


def capped_anthropic_http_client(limit: int = MAX_RESPONSE_BYTES) -> Any:
    """The anthropic SDK's default async HTTP client (the same transport), every body capped at ``limit``."""
    import anthropic

    return anthropic.DefaultAsyncHttpxClient(event_hooks={"response": [_capping(limit)]})
