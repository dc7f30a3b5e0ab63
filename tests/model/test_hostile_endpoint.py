"""A model endpoint that misbehaves, through the real CLI: it drips its answer, sends an
endless or deeply nested body, reports token counts no call could have, or answers 200 with
an error object that echoes the key. Each run ends (exit 1, or 0 when the answer is usable)
with a classified fault, no traceback and no key; the servers here never stop on their own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.hostile_servers import Behaviour, HostileServer, answer, drip, flood

REPO = Path(__file__).resolve().parents[2]
KEY = "sk-test-hostile-endpoint-0c1d"


def http(body: bytes, status: str = "200 OK", content_type: str = "application/json") -> bytes:
    return f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body


def completion(**extra: object) -> bytes:
    body = {"id": "c1", "object": "chat.completion", "created": 1, "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello."}, "finish_reason": "stop"}], **extra}  # fmt: skip
    return json.dumps(body).encode()


ENDPOINTS: dict[str, tuple[Behaviour, int, str]] = {
    "drips its body": (drip(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 99999\r\n\r\n{", b" ", 0.2),
                       1, "(timeout): no complete answer within 1 s"),
    "drips its headers": (drip(b"HTTP/1.1 200 OK\r\n", b"X-Slow: y\r\n", 0.2), 1, "(timeout): no complete answer within 1 s"),
    "sends an endless body": (flood(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n", b"[" * 65536), 1,
                              "(invalid_response): the response is larger than 16 MiB"),
    "sends JSON nested 100,000 deep": (answer(http(b"[" * 100000 + b"]" * 100000)), 1, "nested more than 64 levels deep"),
    "answers 200 with an error that echoes the key": (
        answer(http(json.dumps({"error": {"message": f"Incorrect API key provided: {KEY}"}}).encode())), 1,
        "the response has no choices but an error: Incorrect API key provided: [REDACTED]",
    ),
    "reports 10^26 input tokens": (answer(http(completion(usage={"prompt_tokens": 10**26, "completion_tokens": 3}))), 0, "completed"),
    "reports negative and text token counts": (
        answer(http(completion(usage={"prompt_tokens": -5, "completion_tokens": "many", "prompt_tokens_details": {"cached_tokens": 10**30}}))),
        0, "completed",
    ),
}  # fmt: skip


@pytest.mark.parametrize("endpoint", list(ENDPOINTS))
def test_a_misbehaving_model_endpoint_ends_the_run_cleanly(tmp_path: Path, endpoint: str) -> None:
    behaviour, code, said = ENDPOINTS[endpoint]
    root = tmp_path / "p"
    (root / "agents.d").mkdir(parents=True)
    (root / "tasks.d").mkdir()
    (root / "agents.d" / "w.yaml").write_text("apiVersion: runner/v1\nkind: Agent\nname: w\nmodel: {id: m, timeout_seconds: 1, retries: 1}\n")
    (root / "tasks.d" / "t.yaml").write_text("apiVersion: runner/v1\nkind: Task\nname: t\nagent: w\ngoal: Say hello.\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI", "OTEL_"))}
    with HostileServer(behaviour) as server:
        env.update(PYTHONPATH=str(REPO), OPENAI_BASE_URL=f"http://127.0.0.1:{server.port}/v1", OPENAI_API_KEY=KEY)
        done = subprocess.run([sys.executable, "-m", "runner", "run", "t"], cwd=root, env=env, capture_output=True, text=True,
                              timeout=120, stdin=subprocess.DEVNULL)  # fmt: skip
    assert done.returncode == code and said in done.stderr, done.stderr[-2000:]
    assert "Traceback" not in done.stderr and KEY not in done.stderr + done.stdout
    for stored in (root / ".runner").glob("runs.sqlite3*"):  # the database and its write-ahead log
        assert KEY.encode() not in stored.read_bytes(), stored
