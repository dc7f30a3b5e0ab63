"""Delivery pieces in isolation: the message a header injection cannot change, the webhook
payload, copy targets, and outcomes that never carry a secret."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.config.report_options import Delivery
from runner.reports.delivery.deliver import deliver_all
from runner.reports.delivery.email import build_message
from runner.reports.delivery.outcome import Package
from runner.reports.delivery.webhook import describe, payload


def package(tmp_path: Path, **environ: str) -> Package:
    html = tmp_path / "report.html"
    html.write_text('<html><meta http-equiv="Content-Security-Policy" content="default-src \'none\'; img-src data:">'
                    '<img src="data:image/png;base64,iVBORw0KGgo=" alt="c"></html>')
    pdf = tmp_path / "report.pdf"
    pdf.write_bytes(b"%PDF-1.4 x")
    return Package(tmp_path, {"html": html, "pdf": pdf}, title="Daily", status="completed", summary="All good.",
                   run_id="r1", task="t", environ=environ)


def test_a_rendered_subject_cannot_add_headers(tmp_path: Path) -> None:
    settings = {"to": ["a@example.com"], "from": "r@example.com", "smtp": {"host": "localhost"}}
    message, attached = build_message(settings, package(tmp_path), "Sales\r\nBcc: evil@example.com")
    assert message["Bcc"] is None and "\n" not in message["Subject"]
    assert attached == ["report.pdf"]
    html = next(p for p in message.walk() if p.get_content_type() == "text/html").get_content()
    assert 'src="cid:' in html and "data:image" not in html and "img-src cid:" in html


def test_webhook_payload_is_slack_compatible_and_hides_the_url() -> None:
    body = payload(Package(Path("."), {}, title="T", status="failed", summary="x" * 5000, run_id="r"), "https://r/1")
    assert body["text"] == "T: failed — https://r/1" and body["blocks"][0]["type"] == "header"
    assert len(body["blocks"][2]["text"]["text"]) <= 3000 and body["summary"] == "x" * 5000
    assert describe("https://hooks.slack.com/services/T0/B0/SECRET") == "https://hooks.slack.com/…"


def test_outcomes_name_no_secret_and_copy_stays_in_its_directory(tmp_path: Path) -> None:
    secret = "https://hooks.example.com/very/secret/path"
    targets = [
        Delivery("hook", "webhook", {"url_env": "HOOK", "retries": 0, "timeout_seconds": 2}),
        Delivery("unset", "webhook", {"url_env": "NOT_SET"}),
        Delivery("climb", "copy", {"to": "file:///tmp/reports/{{ x }}"}),
    ]
    env_package = package(tmp_path, HOOK=secret.replace("hooks.example.com", "127.0.0.1:9"))
    outcomes = deliver_all(
        targets, env_package, lambda template: template.replace("{{ x }}", "../../etc"),
        earlier={}, secrets=[secret.replace("hooks.example.com", "127.0.0.1:9")], root=tmp_path, now=lambda: "now",
    )  # fmt: skip
    assert [(o.name, o.status, o.error_kind) for o in outcomes] == [
        ("hook", "failed", "connection"), ("unset", "failed", "config"), ("climb", "failed", "config"),
    ]  # fmt: skip
    for outcome in outcomes:
        assert "secret" not in str(outcome.as_dict())
    assert "NOT_SET" in (outcomes[1].error or "") and ".." in (outcomes[2].error or "")


def test_copy_to_memory_and_file_urls(tmp_path: Path) -> None:
    import fsspec

    (tmp_path / "r").mkdir()
    pkg = package(tmp_path / "r")
    targets = [Delivery("mem", "copy", {"to": "memory://reports/daily"}), Delivery("disk", "copy", {"to": f"file://{tmp_path}/out"})]
    outcomes = deliver_all(targets, pkg, lambda t: t, earlier={}, secrets=[], root=tmp_path, now=lambda: "now")
    assert [o.status for o in outcomes] == ["delivered", "delivered"]
    memory = fsspec.filesystem("memory")
    assert memory.cat_file("/reports/daily/report.pdf") == b"%PDF-1.4 x"
    assert (tmp_path / "out" / "report.html").read_text().startswith("<html>")
    missing = deliver_all([Delivery("s3", "copy", {"to": "s3://bucket/x"})], pkg, lambda t: t, earlier={}, secrets=[], root=tmp_path, now=lambda: "n")
    assert missing[0].status == "failed" and missing[0].error_kind == "config" and "s3" in (missing[0].error or "")


@pytest.mark.parametrize("tls", ["none"])
def test_clear_text_smtp_only_to_localhost(tmp_path: Path, tls: str) -> None:
    target = Delivery("mail", "email", {"to": ["a@example.com"], "from": "r@example.com", "smtp": {"host": "smtp.example.com", "tls": tls}})
    (outcome,) = deliver_all([target], package(tmp_path), lambda t: t, earlier={}, secrets=[], root=tmp_path, now=lambda: "n")
    assert outcome.status == "failed" and outcome.error_kind == "config" and "clear text" in (outcome.error or "")
