"""Embedding requests an endpoint bills and then answers 5xx: the SDK's own retries sent
three requests on one reservation, so a capped run could pay three times what it reserved.
Each attempt is now reserved and settled on its own."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from runner.errors import ModelError
from runner.model.embeddings import OpenAIEmbedder
from tests.support.serving import serving

pytestmark = pytest.mark.timeout(60)


class Failing:
    """An embeddings endpoint that answers 500 to the first ``failures`` requests."""

    def __init__(self, failures: int) -> None:
        self.failures, self.requests = failures, 0

    def answer(self) -> tuple[int, dict[str, object]]:
        self.requests += 1
        if self.requests <= self.failures:
            return 500, {"error": {"message": "upstream timed out after billing", "type": "server_error"}}
        vector = {"object": "embedding", "index": 0, "embedding": [0.6, 0.8]}
        return 200, {"object": "list", "data": [vector], "model": "e", "usage": {"prompt_tokens": 3, "total_tokens": 3}}


@pytest.fixture
def endpoint(request: pytest.FixtureRequest) -> Iterator[tuple[Failing, str]]:
    state = Failing(request.param)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            status, body = state.answer()
            payload = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: object) -> None:
            pass

    with serving(ThreadingHTTPServer(("127.0.0.1", 0), Handler)) as server:
        yield state, f"http://127.0.0.1:{server.server_address[1]}/v1"


class Meter:
    """Counts reservations and how each was settled."""

    def __init__(self) -> None:
        self.opened, self.settled = 0, []  # type: ignore[var-annotated]

    def open(self, model: str, texts: Sequence[str]) -> Meter:
        self.opened += 1
        return self

    def answered(self, input_tokens: int | None, latency: float) -> None:
        self.settled.append("answered")

    def failed(self, kind: str, message: str) -> None:
        self.settled.append(kind)


@pytest.mark.parametrize("endpoint", [2], indirect=True)
async def test_every_attempt_the_endpoint_saw_was_reserved(endpoint: tuple[Failing, str]) -> None:
    state, url = endpoint
    embedder, meter = OpenAIEmbedder("e", base_url=url, api_key="sk-test-embed-0001", timeout_seconds=10), Meter()
    embedder.meter = meter
    assert await embedder.embed(["hello"]) == [[0.6, 0.8]]
    await embedder.aclose()
    assert state.requests == meter.opened == 3
    assert meter.settled == ["server_error", "server_error", "answered"]


@pytest.mark.parametrize("endpoint", [10], indirect=True)
async def test_an_endpoint_that_keeps_failing_ends_after_its_retries(endpoint: tuple[Failing, str]) -> None:
    state, url = endpoint
    embedder, meter = OpenAIEmbedder("e", base_url=url, api_key="sk-test-embed-0001", timeout_seconds=10), Meter()
    embedder.meter = meter
    with pytest.raises(ModelError, match=r"embeddings: .*upstream timed out after billing.*\(after 3 attempts\)") as failure:
        await embedder.embed(["hello"])
    await embedder.aclose()
    assert failure.value.kind == "server_error"
    assert state.requests == meter.opened == 3 and meter.settled == ["server_error"] * 3
