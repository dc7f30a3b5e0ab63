"""OTLP receivers that misbehave, through the real CLI: one that never answers, drips its
answer, answers 500 or garbage, resets the connection, answers 200 with an endless body, or
is not there. The run ends with its own exit code in bounded time (these servers never stop
on their own: an unbounded wait would hang the test), says once (not per span or retry) that
traces were not exported, and never puts the API key in an exported span. OpenTelemetry
settings that cannot work are a usage error (exit 2) before any model call."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from runner.model.server import ScriptedServer
from tests.hostile_servers import Behaviour, HostileServer, answer, drip, flood, reset, silent, unused_port
from tests.support.serving import serving

KEY = "sk-test-otlp-hostile-5eC7e7"
HEADER_SECRET = "otlp-header-secret-91b2"
NOTICE = "traces: spans were not exported to"


def runner(project_dir: Path, server: ScriptedServer, *args: str, **environ: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI", "OTEL_"))}
    env.update(PYTHONPATH=str(Path(__file__).resolve().parents[2]), OPENAI_BASE_URL=server.base_url, OPENAI_API_KEY=KEY,
               OTEL_EXPORTER_OTLP_TIMEOUT="2", **environ)  # fmt: skip
    return subprocess.run([sys.executable, "-m", "runner", *args], cwd=project_dir, env=env, capture_output=True,
                          text=True, timeout=120, stdin=subprocess.DEVNULL)  # fmt: skip


def http(status: str, body: bytes = b"") -> bytes:
    return f"HTTP/1.1 {status}\r\nContent-Type: application/x-protobuf\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body


RECEIVERS: dict[str, tuple[Behaviour, str | None]] = {
    "never answers": (silent, "no answer within 2 s"),
    "drips its status line": (drip(b"HTTP/1.1 2", b"0", 0.2), "no answer within 2 s"),
    "answers 500": (answer(http("500 Internal Server Error")), "the receiver answered HTTP 500"),
    "answers 503 and asks to retry in an hour": (answer(http("503 Busy").replace(b"\r\n\r\n", b"\r\nRetry-After: 3600\r\n\r\n")), "HTTP 503"),
    "answers garbage": (answer(b"\x00\xffnot http\r\n\r\n"), "could not be reached, or dropped the connection"),
    "resets the connection": (reset, "could not be reached, or dropped the connection"),
    "answers 200 with an endless body": (flood(http("200 OK").replace(b"Content-Length: 0", b"Content-Length: 99999999999"), b"x" * 65536), None),
}


@pytest.mark.parametrize("receiver", list(RECEIVERS))
def test_a_misbehaving_receiver_does_not_hold_the_run_and_is_reported_once(project_dir: Path, receiver: str) -> None:
    behaviour, said = RECEIVERS[receiver]
    with HostileServer(behaviour) as otlp, ScriptedServer({"fallback": "Four."}) as model:
        done = runner(project_dir, model, "run", "sum", "-i", "a=2", OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{otlp.port}")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "Four." and otlp.connections >= 1
    assert "Traceback" not in done.stderr and KEY not in done.stderr + done.stdout
    if said is None:
        assert NOTICE not in done.stderr
        return
    (line,) = [line for line in done.stderr.splitlines() if NOTICE in line]
    assert f"{NOTICE} http://127.0.0.1:{otlp.port}/v1/traces: " in line and said in line, line
    assert "retrying" not in done.stderr and "Failed to export" not in done.stderr  # the exporter's own lines are kept out


def test_an_unreachable_receiver_is_reported_once(project_dir: Path) -> None:
    with ScriptedServer({"fallback": "Four."}) as model:
        done = runner(project_dir, model, "run", "sum", "-i", "a=2", OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=f"http://127.0.0.1:{unused_port()}/v1/traces")
    assert done.returncode == 0 and done.stderr.count(NOTICE) == 1 and "could not be reached" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_batch_against_a_failing_receiver_says_it_once(project_dir: Path) -> None:
    rows = project_dir / "rows.csv"
    rows.write_text("id,a\n" + "".join(f"r{i},{i}\n" for i in range(12)))
    with HostileServer(answer(http("500 Internal Server Error"))) as otlp, ScriptedServer({"fallback": "Done."}) as model:
        done = runner(project_dir, model, "batch", "sum", "--input", str(rows), "--output", str(project_dir / "out.jsonl"),
                      "--concurrency", "2", OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{otlp.port}",
                      OTEL_BSP_MAX_EXPORT_BATCH_SIZE="2", OTEL_BSP_SCHEDULE_DELAY="50")  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert otlp.connections > 2  # many exports failed ...
    assert done.stderr.count(NOTICE) == 1  # ... and it is said once
    assert "Traceback" not in done.stderr and "Queue full" not in done.stderr


class Receiver:
    """A loopback OTLP/HTTP receiver that accepts everything and keeps the raw requests."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.headers: list[dict[str, str]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                receiver.bodies.append(self.rfile.read(int(self.headers["Content-Length"])))
                receiver.headers.append(dict(self.headers))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def spans(self) -> list[Any]:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

        found = []
        for body in self.bodies:
            request = ExportTraceServiceRequest()
            request.ParseFromString(body)
            found += [span for rs in request.resource_spans for ss in rs.scope_spans for span in ss.spans]
        return found


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    made = Receiver()
    with serving(made.server):
        yield made


def test_no_exported_span_holds_the_key_whatever_the_endpoint_echoes(project_dir: Path, receiver: Receiver) -> None:
    """The endpoint puts the key everywhere it can: in a tool name, the content, the finish
    reason and an error body. The spans go out (the receiver decodes them) without it."""
    script = {"rules": [
        {"when": {"last_role": "user"}, "times": 1, "reply": {"fault": {"status": 500, "body": {"error": {"message": f"Incorrect API key provided: {KEY}"}}}}},
        {"when": {"last_role": "user"}, "times": 1, "reply": {"tool_calls": [{"name": KEY, "arguments": {"key": KEY}}]}},
        {"when": {"last_role": "tool"}, "reply": {"content": f"Four, and your key is {KEY}.", "finish_reason": KEY}},
    ]}  # fmt: skip
    with ScriptedServer(script) as model:
        done = runner(project_dir, model, "run", "sum", "-i", "a=2", OTEL_EXPORTER_OTLP_ENDPOINT=receiver.url,
                      OTEL_EXPORTER_OTLP_HEADERS=f"x-api-key={HEADER_SECRET}")  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    spans = receiver.spans()
    names = {span.name for span in spans}
    assert "invoke_workflow sum" in names and "chat gpt-4o-mini" in names and "execute_tool [REDACTED]" in names, names
    assert all(KEY.encode() not in body for body in receiver.bodies)
    assert receiver.headers[0].get("x-api-key") == HEADER_SECRET  # the receiver's key goes to the receiver ...
    assert HEADER_SECRET not in done.stderr + done.stdout and KEY not in done.stderr  # ... and nowhere else
    assert NOTICE not in done.stderr


@pytest.mark.parametrize(
    ("variable", "value", "named"),
    [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "not a url", "OTEL_EXPORTER_OTLP_ENDPOINT is not an OTLP/HTTP URL"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:99999", "OTEL_EXPORTER_OTLP_ENDPOINT is not an OTLP/HTTP URL"),
        ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "ftp://user:pw-secret-3@example.com/v1/traces", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is not"),
        ("OTEL_ATTRIBUTE_COUNT_LIMIT", "many", "OTEL_ATTRIBUTE_COUNT_LIMIT must be a non-negative integer"),
        ("OTEL_BSP_MAX_QUEUE_SIZE", "0", "max_queue_size must be a positive integer"),
    ],
)
def test_opentelemetry_settings_that_cannot_work_are_a_usage_error(project_dir: Path, variable: str, value: str, named: str) -> None:
    environ = {variable: value}
    if "ENDPOINT" not in variable:
        environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = f"http://127.0.0.1:{unused_port()}"
    with ScriptedServer({"fallback": "Four."}) as model:
        done = runner(project_dir, model, "run", "sum", "-i", "a=2", **environ)
        assert not model.requests  # refused before any call
    assert done.returncode == 2 and named in done.stderr, done.stderr[-2000:]
    assert "Traceback" not in done.stderr and "pw-secret-3" not in done.stderr


def test_traces_turned_off_ignore_a_broken_endpoint(project_dir: Path) -> None:
    with ScriptedServer({"fallback": "Four."}) as model:
        done = runner(project_dir, model, "run", "sum", "-i", "a=2", OTEL_EXPORTER_OTLP_ENDPOINT="not a url", OTEL_SDK_DISABLED="true")
    assert done.returncode == 0 and NOTICE not in done.stderr and "Traceback" not in done.stderr


def test_an_explicit_flush_is_bounded_too(tmp_path: Path) -> None:
    """What an Airflow task does before it ends (``runner.tracing.flush``): against a receiver
    that drips its answer for ever it returns after the export timeout and says why once."""
    script = (
        "from runner.tracing import TraceSettings, flush\n"
        "from runner.tracing.provider import tracer_for\n"
        "with tracer_for(TraceSettings(None)).start_as_current_span('x'):\n"
        "    pass\n"
        "flush()\n"
        "print('flushed', flush=True)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI", "OTEL_"))}
    with HostileServer(drip(b"HTTP/1.1 200 OK\r\n", b"X-Slow: y\r\n", 0.2)) as otlp:
        env.update(PYTHONPATH=str(Path(__file__).resolve().parents[2]), OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{otlp.port}",
                   OTEL_EXPORTER_OTLP_TIMEOUT="2")  # fmt: skip
        done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "flushed", done.stderr[-2000:]
    assert done.stderr.count(NOTICE) == 1 and "Traceback" not in done.stderr
