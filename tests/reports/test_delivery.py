"""report.deliver through the real CLI against real servers: an SMTP server (aiosmtpd, STARTTLS
with a self-signed certificate, login required), a loopback webhook receiver, a file:// copy.
A failed delivery keeps the run's result (exit 5), and a resume re-delivers only what failed."""

from __future__ import annotations

import email
import json
import os
import shutil
import socket
import sqlite3
import ssl
import subprocess
import sys
from collections.abc import Iterator
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from runner.model.server import ScriptedServer
from tests.support.project import copy_shipped
from tests.support.serving import serving

REPO = Path(__file__).resolve().parents[2]
SMTP_USER = "reports@example.com"
SMTP_PASSWORD = "smtp-pw-never-shown-7f3a"
HOOK_SECRET = "T000/B000/hook-secret-path-9c1d"
NARRATIVE = "Revenue was steady across regions."  # the report's checks replace it by the figures themselves


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 / localhost."""
    root = tmp_path_factory.mktemp("tls")
    key, cert = root / "key.pem", root / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert, "-days", "2",
         "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return cert, key


class Inbox:
    """aiosmtpd handler: keeps every message it accepts."""

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self.raw: list[bytes] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.raw.append(envelope.content)
        self.messages.append(email.message_from_bytes(envelope.content))
        return "250 OK"


@pytest.fixture
def smtp(certificate: tuple[Path, Path]) -> Iterator[tuple[Inbox, int]]:
    from aiosmtpd.controller import Controller
    from aiosmtpd.smtp import AuthResult, LoginPassword

    def authenticate(server: Any, session: Any, envelope: Any, mechanism: str, data: Any) -> AuthResult:
        ok = isinstance(data, LoginPassword) and data.login == SMTP_USER.encode() and data.password == SMTP_PASSWORD.encode()
        return AuthResult(success=ok, handled=False)

    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(*certificate)
    inbox = Inbox()
    port = free_port()
    controller = Controller(
        inbox, hostname="127.0.0.1", port=port, tls_context=context, require_starttls=True,
        authenticator=authenticate, auth_require_tls=True, server_hostname="localhost",
    )  # fmt: skip
    controller.start()
    try:
        yield inbox, port
    finally:
        controller.stop()


class Hooks:
    """A loopback webhook receiver; answers ``statuses`` in turn, then 200."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.paths: list[str] = []
        self.statuses: list[int] = []


@pytest.fixture
def hooks() -> Iterator[tuple[Hooks, str]]:
    state = Hooks()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            state.bodies.append(json.loads(body))
            state.paths.append(self.path)
            status = state.statuses.pop(0) if state.statuses else 200
            self.send_response(status)
            if status == 503:
                self.send_header("Retry-After", "0")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args: Any) -> None:
            pass

    with serving(ThreadingHTTPServer(("127.0.0.1", 0), Handler)) as server:
        yield state, f"http://127.0.0.1:{server.server_address[1]}/services/{HOOK_SECRET}"


def project_with_delivery(tmp_path: Path, smtp_port: int, cert: Path, formats: str = "[markdown, html, json, pdf, xlsx]") -> Path:
    root = copy_shipped(tmp_path / "project", ("agents.d", "tasks.d", "examples/data"))
    (root / "certs").mkdir()
    shutil.copy(cert, root / "certs" / "smtp.pem")
    task = (root / "tasks.d" / "daily_report.yaml").read_text()
    deliver = f"""\
  formats: {formats}
  deliver:
    - email:
        to: [team@example.com]
        from: {SMTP_USER}
        subject: "Sales {{{{ inputs.date }}}}"
        attach: [pdf, xlsx, charts]
        smtp: {{host: 127.0.0.1, port: {smtp_port}, username_env: SMTP_USER, password_env: SMTP_PASSWORD, ca_file: certs/smtp.pem}}
    - webhook: {{url_env: REPORT_WEBHOOK_URL, link: "https://reports.example.com/{{{{ run_id }}}}/report.html", retries: 2}}
    - copy: {{to: "file://{root / 'shared' / 'daily'}/{{{{ inputs.date }}}}", formats: [html, pdf, xlsx, charts]}}
"""
    task = task.replace("  tables: [day_totals, week_ago_totals, by_region, by_category]\n",
                        "  tables: [day_totals, week_ago_totals, by_region, by_category]\n" + deliver)
    (root / "tasks.d" / "daily_report.yaml").write_text(task)
    return root


def run(root: Path, *args: str, password: str = SMTP_PASSWORD, hook_url: str = "") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI")}
    env.update(SMTP_USER=SMTP_USER, SMTP_PASSWORD=password, REPORT_WEBHOOK_URL=hook_url, PYTHONPATH=str(REPO))
    with ScriptedServer({"fallback": NARRATIVE}) as model:
        env.update(OPENAI_BASE_URL=model.base_url, OPENAI_API_KEY="sk-delivery-test-key")
        return subprocess.run(
            [sys.executable, "-m", "runner", "run", "daily_report", "--input", "date=2026-11-30", *args],
            cwd=root, env=env, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
        )


def report_dir(root: Path) -> Path:
    (found,) = (root / "reports" / "daily_report").iterdir()
    return found


def assert_no_secrets(root: Path, *texts: str) -> None:
    for secret in (SMTP_PASSWORD, HOOK_SECRET):
        for text in texts:
            assert secret not in text
        for path in [*root.joinpath("reports").rglob("*"), *root.joinpath(".runner").glob("runs.sqlite3*"), *root.joinpath("shared").rglob("*")]:
            if path.is_file():
                assert secret.encode() not in path.read_bytes(), path


@pytest.mark.browser
def test_email_webhook_and_copy_arrive(tmp_path: Path, smtp: tuple[Inbox, int], hooks: tuple[Hooks, str], certificate: tuple[Path, Path]) -> None:
    inbox, port = smtp
    receiver, hook_url = hooks
    root = project_with_delivery(tmp_path, port, certificate[0])
    result = run(root, hook_url=hook_url)
    assert result.returncode == 0, result.stderr
    assert "delivery email (team@example.com via 127.0.0.1:" in result.stderr and "delivered" in result.stderr

    (message,) = inbox.messages
    assert message["Subject"] == "Sales 2026-11-30" and message["From"] == SMTP_USER and message["To"] == "team@example.com"
    html = next(p for p in message.walk() if p.get_content_type() == "text/html").get_payload(decode=True).decode()
    record = json.loads((report_dir(root) / "report.json").read_text())
    summary = record["final_output"]
    assert "Daily sales report — 2026-11-30" in html and "revenue on 2026-11-30" in html and "$" in html
    assert "data:image" not in html and html.count('src="cid:') == 2
    inline = [p for p in message.walk() if p.get_content_type() == "image/png" and p.get("Content-ID")]
    assert {p["Content-ID"].strip("<>") for p in inline} == {s.split('"')[0] for s in html.split('src="cid:')[1:]}
    attachments = {p.get_filename(): p.get_payload(decode=True) for p in message.walk() if p.get_filename()}
    assert {"report.pdf", "report.xlsx", "trend.png", "regions.png"} <= set(attachments)
    assert attachments["report.pdf"][:5] == b"%PDF-"
    import io

    from openpyxl import load_workbook

    book = load_workbook(io.BytesIO(attachments["report.xlsx"]))
    assert "Totals for the day" in book.sheetnames

    (body,) = receiver.bodies
    assert body["title"] == "Daily sales report — 2026-11-30" and body["status"] == "completed"
    assert body["summary"] == summary and body["link"].startswith("https://reports.example.com/daily_report-")
    assert body["text"].startswith("Daily sales report") and body["blocks"][0]["type"] == "header"

    copied = root / "shared" / "daily" / "2026-11-30"
    assert {p.name for p in copied.iterdir()} == {"report.html", "report.pdf", "report.xlsx", "trend.png", "regions.png"}

    assert [(d["name"], d["status"]) for d in record["deliveries"]] == [("email", "delivered"), ("webhook", "delivered"), ("copy", "delivered")]
    webhook = record["deliveries"][1]
    assert webhook["target"].startswith("http://127.0.0.1:") and HOOK_SECRET not in webhook["target"]
    assert_no_secrets(root, result.stdout, result.stderr, *(raw.decode("utf-8", "replace") for raw in inbox.raw))


def test_failed_delivery_keeps_the_result_and_a_resume_sends_only_what_failed(
    tmp_path: Path, smtp: tuple[Inbox, int], hooks: tuple[Hooks, str], certificate: tuple[Path, Path]
) -> None:
    inbox, port = smtp
    receiver, hook_url = hooks
    root = project_with_delivery(tmp_path, port, certificate[0], formats="[markdown, html, json]")
    receiver.statuses = [500, 500, 500]  # every attempt of the first run (1 + 2 retries)
    first = run(root, "--run-id", "daily-1", hook_url=hook_url)
    assert first.returncode == 5, first.stderr
    assert "revenue on 2026-11-30" in first.stdout  # the run's answer is not lost
    assert "delivery webhook (http://127.0.0.1:" in first.stderr and "FAILED (http_status)" in first.stderr, first.stderr[-1500:]
    assert "--run-id daily-1" in first.stderr
    assert len(inbox.messages) == 1 and len(receiver.bodies) == 3
    record = json.loads((report_dir(root) / "report.json").read_text())
    assert {d["name"]: d["status"] for d in record["deliveries"]} == {"email": "delivered", "webhook": "failed", "copy": "delivered"}
    assert record["deliveries"][1]["attempts"] == 3 and record["status"] == "completed"
    shown = (report_dir(root) / "report.html").read_text()  # the report on disk says where it went
    assert 'id="delivery"' in shown and "answered HTTP 500" in shown and HOOK_SECRET not in shown
    assert "| webhook | webhook |" in (report_dir(root) / "report.md").read_text()
    with sqlite3.connect(root / ".runner" / "runs.sqlite3") as store:
        status, stored = store.execute("SELECT status, record_json FROM runs WHERE run_id = 'daily-1'").fetchone()
    assert status == "completed" and json.loads(stored)["deliveries"][1]["status"] == "failed"

    second = run(root, "--run-id", "daily-1", hook_url=hook_url)
    assert second.returncode == 0, second.stderr
    assert len(inbox.messages) == 1  # the email is not sent twice
    assert len(receiver.bodies) == 4 and receiver.bodies[-1]["status"] == "completed"
    assert "delivered in an earlier attempt, not sent again" in second.stderr
    record = json.loads((report_dir(root) / "report.json").read_text())
    assert [d["status"] for d in record["deliveries"]] == ["delivered"] * 3
    assert [d.get("earlier_attempt") for d in record["deliveries"]] == [True, False, True]
    assert_no_secrets(root, first.stdout, first.stderr, second.stdout, second.stderr)


def test_webhook_retries_then_arrives(tmp_path: Path, smtp: tuple[Inbox, int], hooks: tuple[Hooks, str], certificate: tuple[Path, Path]) -> None:
    _, port = smtp
    receiver, hook_url = hooks
    root = project_with_delivery(tmp_path, port, certificate[0], formats="[markdown, html, json]")
    receiver.statuses = [503, 503]
    result = run(root, hook_url=hook_url)
    assert result.returncode == 0, result.stderr
    record = json.loads((report_dir(root) / "report.json").read_text())
    assert record["deliveries"][1]["attempts"] == 3 and len(receiver.bodies) == 3


def test_wrong_smtp_password_is_a_recorded_failure(tmp_path: Path, smtp: tuple[Inbox, int], hooks: tuple[Hooks, str], certificate: tuple[Path, Path]) -> None:
    inbox, port = smtp
    _, hook_url = hooks
    root = project_with_delivery(tmp_path, port, certificate[0], formats="[markdown, html, json]")
    wrong = "wrong-password-also-secret"
    result = run(root, password=wrong, hook_url=hook_url)
    assert result.returncode == 5 and not inbox.messages
    assert "FAILED (auth)" in result.stderr and wrong not in result.stderr + result.stdout, result.stderr[-800:]
    assert "Traceback" not in result.stderr


def test_untrusted_certificate_sends_nothing(tmp_path: Path, smtp: tuple[Inbox, int], hooks: tuple[Hooks, str], certificate: tuple[Path, Path]) -> None:
    inbox, port = smtp
    _, hook_url = hooks
    root = project_with_delivery(tmp_path, port, certificate[0], formats="[markdown, html, json]")
    task = root / "tasks.d" / "daily_report.yaml"
    task.write_text(task.read_text().replace(", ca_file: certs/smtp.pem", ""))
    result = run(root, hook_url=hook_url)
    assert result.returncode == 5 and not inbox.messages
    assert "FAILED (tls)" in result.stderr and SMTP_PASSWORD not in result.stderr


def test_delivery_config_is_checked_at_validate_time(tmp_path: Path, certificate: tuple[Path, Path]) -> None:
    root = project_with_delivery(tmp_path, 2525, certificate[0])
    task = root / "tasks.d" / "daily_report.yaml"
    original = task.read_text()

    def validate(text: str) -> str:
        task.write_text(text)
        result = subprocess.run([sys.executable, "-m", "runner", "validate"], cwd=root, capture_output=True, text=True,
                                timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
        assert result.returncode == 2 and "Traceback" not in result.stderr
        return result.stdout + result.stderr

    out = validate(original.replace("to: [team@example.com]", "to: [not-an-address]"))
    assert "/report/deliver/0/email/to/0: 'not-an-address' is not valid here: an email address" in out
    out = validate(original.replace("    - copy:", "    - name: email\n      copy:").replace('"Sales {{ inputs.date }}"', '"Sales {{ inputs.day }}"'))
    assert "/report/deliver/0/email/subject: template uses undefined input 'inputs.day'" in out
    assert "a second delivery named 'email'" in out
    out = validate(original.replace("webhook: {url_env: REPORT_WEBHOOK_URL,", "webhook: {url_env: REPORT_WEBHOOK_URL, url: 'http://x',"))
    assert "/report/deliver/1/webhook" in out



def test_the_subject_names_the_status_and_a_delivery_may_be_for_success_or_failure_only(
    tmp_path: Path, smtp: tuple[Inbox, int], certificate: tuple[Path, Path]
) -> None:
    """A failed report must not look like a good one: ``{{ status }}`` in the subject, and
    ``when: success | failure`` per delivery."""
    from tests.support.project import run_cli

    inbox, port = smtp
    root = project_with_delivery(tmp_path, port, certificate[0], formats="[markdown, json]")
    task = root / "tasks.d" / "daily_report.yaml"
    shared = root / "shared"
    text = task.read_text()
    start, end = text.index("  deliver:\n"), text.index("  columns:")
    deliver = f"""\
  deliver:
    - email:
        to: [team@example.com]
        from: {SMTP_USER}
        subject: "[{{{{ status | upper }}}}] Sales {{{{ inputs.date }}}} (exit {{{{ exit_code }}}})"
        smtp: {{host: 127.0.0.1, port: {port}, username_env: SMTP_USER, password_env: SMTP_PASSWORD, ca_file: certs/smtp.pem}}
    - {{name: good, when: success, copy: {{to: "file://{shared}/good/{{{{ inputs.date }}}}"}}}}
    - {{name: bad, when: failure, copy: {{to: "file://{shared}/{{{{ status }}}}/{{{{ inputs.date }}}}"}}}}
"""
    task.write_text(text[:start] + deliver + text[end:])
    env = {"SMTP_USER": SMTP_USER, "SMTP_PASSWORD": SMTP_PASSWORD}
    valid = run_cli(root, None, "validate")
    assert valid.returncode == 0, valid.stdout + valid.stderr
    with ScriptedServer({"fallback": NARRATIVE}) as model:
        good = run_cli(root, model, "run", "daily_report", "--input", "date=2026-11-30", env=env)
    with ScriptedServer({"fallback": {"fault": {"status": 401, "body": {"error": {"message": "bad key"}}}}}) as model:
        bad = run_cli(root, model, "run", "daily_report", "--input", "date=2026-11-29", env=env)
    assert good.returncode == 0 and bad.returncode == 1, good.stderr + bad.stderr
    assert [message["Subject"] for message in inbox.messages] == [
        "[COMPLETED] Sales 2026-11-30 (exit 0)", "[FAILED] Sales 2026-11-29 (exit 1)",
    ]  # fmt: skip
    assert [p.name for p in (shared / "good").iterdir()] == ["2026-11-30"]
    assert [p.name for p in (shared / "failed").iterdir()] == ["2026-11-29"]
    assert "delivery 'bad' not sent: it is for when: failure, and the run is completed" in good.stderr
    assert "delivery 'good' not sent: it is for when: success, and the run is failed" in bad.stderr
