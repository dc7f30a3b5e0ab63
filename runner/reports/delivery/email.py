"""Email over SMTP: report.html inline (its charts as inline images), other files attached.

STARTTLS by default (the connection is upgraded, and the server's certificate checked,
before any credential is sent); ``tls: implicit`` for port 465; ``tls: none`` only to a
server on this machine. The user name and password come from the variables the task names.
The whole conversation must end within ``timeout_seconds`` (default 60), however the server
paces it (:mod:`runner.reports.delivery.smtp_client`).
"""

from __future__ import annotations

import base64
import re
import smtplib
import socket
import ssl
from collections.abc import Mapping
from email.message import EmailMessage
from email.utils import make_msgid
from typing import Any

from runner.reports.delivery.outcome import DeliveryFailed, Package
from runner.reports.delivery.smtp_client import ConversationExpired, conversation

DEFAULT_ATTACH = ("pdf", "xlsx", "markdown", "json")
MEDIA_TYPES = {".pdf": "application/pdf", ".xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
               ".md": "text/markdown", ".json": "application/json", ".png": "image/png", ".svg": "image/svg+xml"}  # fmt: skip
_DATA_IMAGE = re.compile(r'src="data:(image/(?:png|jpeg|gif));base64,([A-Za-z0-9+/=]+)"')
_LOCAL_HOSTS = {"localhost", "127.0.0.1", "::1"}


def describe(settings: Mapping[str, Any]) -> str:
    """Where the message goes, for the record (no credentials)."""
    smtp = settings["smtp"]
    return f"{', '.join(settings['to'])} via {smtp['host']}:{_port(smtp)}"


def send_email(settings: Mapping[str, Any], package: Package, subject: str) -> list[str]:
    """Send the report; returns the attached file names. :class:`DeliveryFailed` otherwise."""
    message, attached = build_message(settings, package, subject)
    smtp = settings["smtp"]
    tls = smtp.get("tls", "starttls")
    host, port, timeout = smtp["host"], _port(smtp), float(smtp.get("timeout_seconds", 60))
    if tls == "none" and host not in _LOCAL_HOSTS:
        raise DeliveryFailed(f"tls: none sends the report and the password in clear text; it is allowed only to localhost, not {host}", "config")
    user, password = _credentials(smtp, package.environ)
    try:
        context = ssl.create_default_context(cafile=smtp.get("ca_file"))  # ca_file: resolved from the project root
        with conversation(host, port, implicit_tls=tls == "implicit", timeout=timeout, context=context) as client:
            client.ehlo()
            if tls == "starttls":
                client.starttls(context=context)
                client.ehlo()
            if user:
                client.login(user, password)
            refused = client.send_message(message)
    except ConversationExpired as error:
        raise DeliveryFailed(f"the SMTP server {host}:{port} did not finish: {error}", "timeout") from None
    except smtplib.SMTPAuthenticationError as error:
        raise DeliveryFailed(f"the SMTP server refused the login ({error.smtp_code})", "auth") from None
    except smtplib.SMTPNotSupportedError:
        raise DeliveryFailed(f"{host}:{port} does not offer STARTTLS; the report was not sent in clear text", "tls") from None
    except smtplib.SMTPRecipientsRefused as error:
        raise DeliveryFailed(f"the SMTP server refused every recipient: {', '.join(error.recipients)}", "refused") from None
    except smtplib.SMTPResponseException as error:
        raise DeliveryFailed(f"the SMTP server answered {error.smtp_code}: {_text(error.smtp_error)}", "refused") from None
    except ssl.SSLError as error:
        raise DeliveryFailed(f"TLS with {host}:{port} failed: {error.reason or error}", "tls") from None
    except (OSError, smtplib.SMTPException) as error:
        what = "cannot reach" if isinstance(error, ConnectionRefusedError | socket.gaierror) else "the SMTP conversation broke off with"
        raise DeliveryFailed(f"{what} {host}:{port}: {error.__class__.__name__}: {_text(str(error))}", "connection") from None
    if refused:
        raise DeliveryFailed(f"the SMTP server refused {', '.join(sorted(refused))}", "refused")
    return attached


def build_message(settings: Mapping[str, Any], package: Package, subject: str) -> tuple[EmailMessage, list[str]]:
    """The message: a text part, the HTML report with its images inline, and attachments."""
    message = EmailMessage()
    message["Subject"] = " ".join(subject.split())[:300]  # one line: a rendered input cannot add headers
    message["From"] = settings["from"]
    message["To"] = ", ".join(settings["to"])
    if settings.get("cc"):
        message["Cc"] = ", ".join(settings["cc"])
    message["Message-ID"] = make_msgid(domain=settings["from"].rsplit("@", 1)[-1])
    message.set_content(_plain_text(package))
    html = package.files.get("html")
    if html is not None:
        body, images = _inline_images(html.read_text("utf-8"))
        message.add_alternative(body, subtype="html")
        html_part: Any = message.get_payload()[-1]  # type: ignore[index]
        for cid, media_type, data in images:
            maintype, subtype = media_type.split("/", 1)
            html_part.add_related(data, maintype=maintype, subtype=subtype, cid=f"<{cid}>", disposition="inline")
    attached = []
    for path in package.chosen(settings.get("attach"), DEFAULT_ATTACH):
        maintype, subtype = MEDIA_TYPES.get(path.suffix.lower(), "application/octet-stream").split("/", 1)
        message.add_attachment(path.read_bytes(), maintype=maintype, subtype=subtype, filename=path.name)
        attached.append(path.name)
    return message, attached


def _plain_text(package: Package) -> str:
    lines = [package.title, f"Status: {package.status} (run {package.run_id})", ""]
    if package.summary:
        lines += [package.summary, ""]
    if "html" in package.files:
        lines.append("The full report is in the HTML part of this message and in the attachments.")
    else:
        lines.append("The details are in the attachments.")
    return "\n".join(lines) + "\n"


def _inline_images(html: str) -> tuple[str, list[tuple[str, str, bytes]]]:
    """report.html embeds its charts as data: URIs, which many mail clients block: move each
    into a related part referenced by ``cid:``."""
    images: list[tuple[str, str, bytes]] = []

    def swap(match: re.Match[str]) -> str:
        cid = make_msgid(domain="report.runner")[1:-1]
        images.append((cid, match.group(1), base64.b64decode(match.group(2))))
        return f'src="cid:{cid}"'

    body = _DATA_IMAGE.sub(swap, html)
    body = body.replace("img-src data:", "img-src cid: data:")  # the page's own CSP, for clients that honour it
    return body, images


def _credentials(smtp: Mapping[str, Any], environ: Mapping[str, str]) -> tuple[str, str]:
    user_env, password_env = smtp.get("username_env"), smtp.get("password_env")
    user = environ.get(user_env, "") if user_env else ""
    password = environ.get(password_env, "") if password_env else ""
    if user_env and not user:
        raise DeliveryFailed(f"the environment variable {user_env} (SMTP user name) is not set", "config")
    if password_env and not password:
        raise DeliveryFailed(f"the environment variable {password_env} (SMTP password) is not set", "config")
    if password and not user:
        raise DeliveryFailed("an SMTP password needs a user name: add username_env", "config")
    return user, password


def _port(smtp: Mapping[str, Any]) -> int:
    return int(smtp.get("port") or (465 if smtp.get("tls") == "implicit" else 587))


def _text(value: Any) -> str:
    text = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
    return " ".join(text.split())[:300]
