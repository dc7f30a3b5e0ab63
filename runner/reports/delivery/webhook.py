"""A webhook: one JSON POST that Slack's incoming webhooks (and most chat tools) accept.

The payload has Slack's ``text`` and ``blocks`` plus plain ``title``, ``summary``,
``status``, ``link``, ``run_id`` and ``task`` for any other receiver (and a budget warning's
fields under ``budget_warning``). Connection errors,
timeouts, 429 and 5xx are retried with backoff (``Retry-After`` honoured, at most 60 s);
other statuses fail at once, a redirect too (it is not followed). The URL may itself be a
secret (Slack's is): it is never recorded, only its host.

A receiver cannot hold a delivery: each attempt has a wall-clock deadline
(``timeout_seconds``) over connecting, sending and the status line with its headers, which a
server dripping bytes cannot stretch (the attempt is cancelled, not just its last read), and
the answer's body is never read, so a huge one costs nothing.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

from runner.reports.delivery.outcome import DeliveryFailed, Package

MAX_RETRY_AFTER = 60.0
SUMMARY_CHARS = 2800  # Slack's section text limit is 3000


def describe(url: str) -> str:
    """The URL without user info, path or query (a Slack webhook's path is its secret)."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:  # a bracket left open, a port that is not a number
        return "an unusable URL"
    if not parts.scheme or not parts.hostname:
        return "a URL without a scheme or host"
    return f"{parts.scheme}://{parts.hostname}{f':{port}' if port else ''}/…"


def payload(package: Package, link: str | None) -> dict[str, Any]:
    """The JSON body: Slack blocks, and the same facts as plain fields."""
    summary = package.summary if len(package.summary) <= SUMMARY_CHARS else package.summary[: SUMMARY_CHARS - 1] + "…"
    icon = {"completed": ":white_check_mark:", "failed": ":x:", "capped": ":warning:", "stuck": ":warning:",
            "warning": ":warning:"}.get(package.status, "")  # fmt: skip
    text = f"{package.title}: {package.status}" + (f" — {link}" if link else "")
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": package.title[:150]}},
        {"type": "section", "text": {"type": "mrkdwn", "text": f"{icon} *{package.status}* · run `{package.run_id}`".strip()}},
    ]
    if summary:
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": summary}})
    if link:
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": f"<{link}|Open the report>"}})
    return {
        "text": text, "blocks": blocks, "title": package.title, "summary": package.summary, "status": package.status,
        "link": link, "run_id": package.run_id, "task": package.task, "exit_code": package.exit_code, **package.facts,
    }  # fmt: skip


def post_webhook(
    url: str, body: Mapping[str, Any], *, retries: int = 3, timeout: float = 30.0, sleep: Callable[[float], None] = time.sleep
) -> int:
    """POST ``body``; returns the attempts it took. :class:`DeliveryFailed` (no URL in it) otherwise."""
    httpx = _httpx()
    # besides a timeout: transport and protocol errors (a garbled status line, endless
    # headers), a URL httpx cannot use, a socket error
    errors = (httpx.HTTPError, httpx.InvalidURL, OSError)
    data = json.dumps(body, ensure_ascii=False).encode("utf-8")
    where = describe(url)
    problem = url_problem(url)
    if problem is not None:
        hint = "set the webhook's url (or the variable url_env names) to an http:// or https:// URL"
        raise DeliveryFailed(f"the webhook URL is {problem}; {hint}", "config")
    for attempt in range(1, retries + 2):
        wait = min(2.0 ** (attempt - 1), 30.0)
        try:
            status, retry_after = asyncio.run(_post(url, data, timeout))
        except TimeoutError:
            failure = DeliveryFailed(f"POST to {where} got no answer within {timeout:g} s (timeout_seconds)", "timeout", attempt)
        except errors as error:
            failure = DeliveryFailed(f"POST to {where} failed: {type(error).__name__}", "connection", attempt)
        else:
            if status < 300:
                return attempt
            failure = DeliveryFailed(f"POST to {where} answered HTTP {status}{_status_hint(status)}", "http_status", attempt)
            if status != 429 and status < 500:
                raise failure
            wait = _retry_after(retry_after, wait)
        if attempt > retries:
            raise failure
        sleep(wait)
    raise AssertionError("unreachable")


def url_problem(url: str) -> str | None:
    """Why ``url`` (from YAML or a variable) cannot be posted to, or ``None``; never repeats it."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises for a port that is not a number in 0-65535
    except ValueError as error:
        return f"not usable ({error})"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"not an http(s) URL with a host (scheme {parts.scheme or 'none'!r})"
    return None


async def _post(url: str, data: bytes, timeout: float) -> tuple[int, str | None]:
    """One attempt: the status and ``Retry-After``, within ``timeout`` seconds all told; the
    body is not read."""
    headers = {"Content-Type": "application/json; charset=utf-8", "User-Agent": "runner-report-delivery"}
    async with (
        asyncio.timeout(timeout),
        _httpx().AsyncClient(timeout=timeout, follow_redirects=False) as client,
        client.stream("POST", url, content=data, headers=headers) as response,
    ):
        return response.status_code, response.headers.get("retry-after")


def _httpx() -> Any:
    try:
        import httpx2 as httpx
    except ImportError:  # the same API under its original name
        import httpx  # type: ignore[no-redef]
    return httpx


def _status_hint(status: int) -> str:
    if 300 <= status < 400:
        return " (a redirect; it is not followed: give the URL it points to)"
    return ""


def _retry_after(value: str | None, default: float) -> float:
    try:
        seconds = float(value) if value else default
    except ValueError:  # an HTTP date, or garbage: the backoff instead
        return default
    return min(max(seconds, 0.0), MAX_RETRY_AFTER) if math.isfinite(seconds) else default
