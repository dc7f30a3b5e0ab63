"""Delivery servers that misbehave, through the real CLI: a webhook receiver or an SMTP server
that never answers, drips its answer a byte at a time, floods, resets, answers 5xx or
redirects elsewhere. Each run ends with exit 5 in bounded time (the servers here never stop
on their own, so an unbounded wait would hang the test), names the target without its
secret, keeps the report on disk, and shows no traceback."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runner.model.server import ScriptedServer
from tests.hostile_servers import (
    Behaviour,
    HostileServer,
    answer,
    drip,
    flood,
    read_request,
    reset,
    silent,
    unused_port,
)

REPO = Path(__file__).resolve().parents[2]
HOOK_SECRET = "hook-path-secret-4b1e"
SMTP_PASSWORD = "smtp-secret-pw-77aa"
KEY = "sk-test-delivery-hostile-0123"


def project(root: Path, deliver: str) -> Path:
    (root / "agents.d").mkdir(parents=True)
    (root / "tasks.d").mkdir()
    (root / "agents.d" / "writer.yaml").write_text(
        "apiVersion: runner/v1\nkind: Agent\nname: writer\nmodel: {id: scripted}\n"
    )
    (root / "tasks.d" / "note.yaml").write_text(
        "apiVersion: runner/v1\nkind: Task\nname: note\nagent: writer\ngoal: Write a note.\n"
        f"report:\n  formats: [markdown, json]\n  deliver:\n    - {deliver}\n"
    )
    return root


def run(root: Path, **environ: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI", "OTEL_"))}
    env.update(PYTHONPATH=str(REPO), SMTP_USER="reports", SMTP_PASSWORD=SMTP_PASSWORD, **environ)
    with ScriptedServer({"fallback": "The note."}) as model:
        env.update(OPENAI_BASE_URL=model.base_url, OPENAI_API_KEY=KEY)
        return subprocess.run([sys.executable, "-m", "runner", "run", "note"], cwd=root, env=env, capture_output=True,
                              text=True, timeout=120, stdin=subprocess.DEVNULL)  # fmt: skip


def delivery(root: Path) -> dict[str, object]:
    (folder,) = (root / "reports" / "note").iterdir()
    record = json.loads((folder / "report.json").read_text())
    assert (folder / "report.md").is_file() and record["status"] == "completed"  # the report is kept
    (outcome,) = record["deliveries"]
    return dict(outcome)


def assert_clean(root: Path, result: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    shown = result.stdout + result.stderr
    for secret in (HOOK_SECRET, SMTP_PASSWORD, KEY):
        assert secret not in shown
        for path in (root / "reports").rglob("*"):
            if path.is_file():
                assert secret.encode() not in path.read_bytes(), path


def http(status: str, *headers: str, body: bytes = b"") -> bytes:
    lines = [f"HTTP/1.1 {status}", *headers, f"Content-Length: {len(body)}", "", ""]
    return "\r\n".join(lines).encode() + body


WEBHOOK_FAULTS: dict[str, tuple[Behaviour, str, str]] = {
    "never answers": (silent, "timeout", "got no answer within 1 s"),
    "drips its status line": (drip(b"HTTP/1.1 2", b"0", 0.2), "timeout", "got no answer within 1 s"),
    "drips endless headers": (
        drip(b"HTTP/1.1 200 OK\r\n", b"X-Slow: a\r\n", 0.1),
        "timeout",
        "got no answer within 1 s",
    ),
    "floods headers": (
        flood(b"HTTP/1.1 200 OK\r\n", b"X-Flood: " + b"a" * 4000 + b"\r\n"),
        "connection",
        "RemoteProtocolError",
    ),
    "answers 500": (answer(http("500 Oops")), "http_status", "answered HTTP 500"),
    "answers 503 with a NaN Retry-After": (
        answer(http("503 Busy", "Retry-After: nan")),
        "http_status",
        "answered HTTP 503",
    ),
    "redirects to another host": (
        answer(http("302 Found", "Location: http://169.254.169.254/latest")),
        "http_status",
        "redirect",
    ),
    "resets the connection": (reset, "connection", "failed"),
    "answers garbage": (answer(b"\x00\xff not http at all\r\n\r\n"), "connection", "failed"),
}


@pytest.mark.parametrize("fault", list(WEBHOOK_FAULTS))
def test_a_webhook_receiver_that_misbehaves_fails_the_delivery_with_exit_5(tmp_path: Path, fault: str) -> None:
    behaviour, kind, said = WEBHOOK_FAULTS[fault]
    root = project(tmp_path / "p", "webhook: {url_env: HOOK_URL, retries: 1, timeout_seconds: 1}")
    with HostileServer(behaviour) as server:
        result = run(root, HOOK_URL=f"http://127.0.0.1:{server.port}/services/{HOOK_SECRET}")
    assert result.returncode == 5, result.stderr[-2000:]
    outcome = delivery(root)
    assert outcome["status"] == "failed" and outcome["error_kind"] == kind and said in str(outcome["error"]), outcome
    assert outcome["target"] == f"http://127.0.0.1:{server.port}/…"
    assert f"delivery webhook (http://127.0.0.1:{server.port}/…): FAILED ({kind})" in result.stderr
    expected_attempts = 1 if kind == "http_status" and "redirect" in said else 2
    assert outcome["attempts"] == expected_attempts and server.connections == expected_attempts
    assert_clean(root, result)


def test_a_webhook_that_answers_200_with_an_endless_body_is_delivered_without_reading_it(tmp_path: Path) -> None:
    root = project(tmp_path / "p", "webhook: {url_env: HOOK_URL, retries: 0, timeout_seconds: 5}")
    endless = flood(b"HTTP/1.1 200 OK\r\nContent-Length: 100000000000\r\n\r\n", b"x" * 65536)
    with HostileServer(endless) as server:
        result = run(root, HOOK_URL=f"http://127.0.0.1:{server.port}/services/{HOOK_SECRET}")
    assert result.returncode == 0, result.stderr[-2000:]
    assert delivery(root)["status"] == "delivered"
    assert_clean(root, result)


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:99999/x", "not a url", "http://[::1/x", "ftp://user:pw@example.com/x"]
)
def test_an_unusable_webhook_url_is_a_config_failure_that_does_not_echo_it(tmp_path: Path, url: str) -> None:
    root = project(tmp_path / "p", "webhook: {url_env: HOOK_URL, retries: 0, timeout_seconds: 1}")
    result = run(root, HOOK_URL=url)
    assert result.returncode == 5, result.stderr[-2000:]
    outcome = delivery(root)
    assert outcome["error_kind"] == "config" and "http:// or https:// URL" in str(outcome["error"])
    assert "pw@" not in result.stderr and "Traceback" not in result.stderr


def test_an_unreachable_webhook_fails_the_delivery(tmp_path: Path) -> None:
    root = project(tmp_path / "p", "webhook: {url_env: HOOK_URL, retries: 0, timeout_seconds: 1}")
    result = run(root, HOOK_URL=f"http://127.0.0.1:{unused_port()}/services/{HOOK_SECRET}")
    assert result.returncode == 5 and delivery(root)["error_kind"] == "connection"
    assert_clean(root, result)


# --- SMTP ----------------------------------------------------------------------------------


def smtp_until(stall_at: bytes | None, seen: list[bytes] | None = None) -> Behaviour:
    """A plausible SMTP server (no STARTTLS: the task says tls: none) that stops answering at
    the command ``stall_at`` (``None``: never stalls); keeps the lines it read in ``seen``."""

    def behave(sock: socket.socket) -> None:
        sock.sendall(b"220 hostile ESMTP\r\n")
        lines = sock.makefile("rb")
        in_data = False
        while line := lines.readline():
            if seen is not None:
                seen.append(line)
            command = line.strip().upper()
            if in_data:
                if line in (b".\r\n", b".\n"):
                    in_data = False
                    if stall_at == b"END OF DATA":
                        time.sleep(3600)
                    sock.sendall(b"250 queued\r\n")
                continue
            if stall_at is not None and command.startswith(stall_at):
                time.sleep(3600)
            if command.startswith(b"EHLO"):
                sock.sendall(b"250-hostile\r\n250 AUTH PLAIN LOGIN\r\n")
            elif command.startswith(b"AUTH"):
                sock.sendall(b"235 ok\r\n")
            elif command == b"DATA":
                in_data = True
                sock.sendall(b"354 go on\r\n")
            elif command == b"QUIT":
                sock.sendall(b"221 bye\r\n")
                return
            else:
                sock.sendall(b"250 ok\r\n")

    return behave


def greet_with(raw: bytes, *, then: Behaviour | None = None) -> Behaviour:
    def behave(sock: socket.socket) -> None:
        sock.sendall(raw)
        if then is not None:
            then(sock)
        time.sleep(3600)

    return behave


SMTP_FAULTS: dict[str, tuple[Behaviour, str, str]] = {
    "never greets": (silent, "timeout", "within 1 s"),
    "drips its greeting": (drip(b"220-", b"a", 0.1, read_first=False), "timeout", "within 1 s"),
    "sends endless continuation lines": (
        flood(b"", b"220-" + b"a" * 8000 + b"\r\n", read_first=False),
        "connection",
        "more than 1048576 bytes",
    ),
    "stalls after MAIL FROM": (smtp_until(b"MAIL"), "timeout", "within 1 s"),
    "accepts the message then stalls": (smtp_until(b"END OF DATA"), "timeout", "within 1 s"),
    "refuses with 554": (greet_with(b"554 go away\r\n"), "refused", "answered 554"),
    "sends a line longer than SMTP allows": (greet_with(b"220 " + b"a" * 20000 + b"\r\n"), "refused", "Line too long"),
}


@pytest.mark.parametrize("fault", list(SMTP_FAULTS))
def test_an_smtp_server_that_misbehaves_fails_the_delivery_with_exit_5(tmp_path: Path, fault: str) -> None:
    behaviour, kind, said = SMTP_FAULTS[fault]
    with HostileServer(behaviour) as server:
        smtp = f"{{host: 127.0.0.1, port: {server.port}, tls: none, timeout_seconds: 1, username_env: SMTP_USER, password_env: SMTP_PASSWORD}}"
        root = project(tmp_path / "p", f"email: {{to: [team@example.com], from: reports@example.com, smtp: {smtp}}}")
        result = run(root)
    assert result.returncode == 5, result.stderr[-2000:]
    outcome = delivery(root)
    assert outcome["status"] == "failed" and outcome["error_kind"] == kind and said in str(outcome["error"]), outcome
    assert outcome["target"] == f"team@example.com via 127.0.0.1:{server.port}"
    assert f"delivery email (team@example.com via 127.0.0.1:{server.port}): FAILED ({kind})" in result.stderr
    assert_clean(root, result)


def test_a_well_behaved_plain_smtp_server_gets_the_message(tmp_path: Path) -> None:
    """The same fake server, not stalling: the bounds do not get in the way of a delivery."""
    seen: list[bytes] = []
    with HostileServer(smtp_until(None, seen)) as server:
        smtp = f"{{host: 127.0.0.1, port: {server.port}, tls: none, timeout_seconds: 5, username_env: SMTP_USER, password_env: SMTP_PASSWORD}}"
        root = project(tmp_path / "p", f"email: {{to: [team@example.com], from: reports@example.com, smtp: {smtp}}}")
        result = run(root)
    assert result.returncode == 0, result.stderr[-2000:]
    assert delivery(root)["status"] == "delivered"
    assert b"Subject: note [completed]\r\n" in seen and b"QUIT\r\n" in seen


def test_read_request_helper_reads_a_whole_post() -> None:
    """The servers above answer after the request: make sure the helper waits for the body."""
    got: list[bytes] = []

    def keep(sock: socket.socket) -> None:
        got.append(read_request(sock))
        sock.sendall(http("204 No Content"))
        sock.close()

    with HostileServer(keep) as server, socket.create_connection(("127.0.0.1", server.port)) as client:
        client.sendall(b"POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\nhel")
        client.sendall(b"lo")
        assert client.recv(100).startswith(b"HTTP/1.1 204")
    assert got == [b"POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello"]
