"""A webhook: one JSON POST that Slack's incoming webhooks (and most chat tools) accept.

The payload has Slack's ``text`` and ``blocks`` plus plain ``title``, ``summary``,
``status``, ``link``, ``run_id`` and ``task`` for any other receiver. Connection errors,
timeouts, 429 and 5xx are retried with backoff (``Retry-After`` honoured, at most 60 s);
other statuses fail at once. The URL may itself be a secret (Slack's is): it is never
recorded, only its host.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

from runner.reports.delivery.outcome import DeliveryFailed, Package

MAX_RETRY_AFTER = 60.0
SUMMARY_CHARS = 2800  # Slack's section text limit is 3000


def describe(url: str) -> str:
    """The URL without path or query (a Slack webhook's path is its secret)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.hostname}{f':{parts.port}' if parts.port else ''}/…"


def payload(package: Package, link: str | None) -> dict[str, Any]:
    """The JSON body: Slack blocks, and the same facts as plain fields."""
    summary = package.summary if len(package.summary) <= SUMMARY_CHARS else package.summary[: SUMMARY_CHARS - 1] + "…"
    icon = {"completed": ":white_check_mark:", "failed": ":x:", "capped": ":warning:", "stuck": ":warning:"}.get(package.status, "")
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
        "link": link, "run_id": package.run_id, "task": package.task, "exit_code": package.exit_code,
    }  # fmt: skip


def post_webhook(
    url: str, body: Mapping[str, Any], *, retries: int = 3, timeout: float = 30.0, sleep: Callable[[float], None] = time.sleep
) -> int:
    """POST ``body``; returns the attempts it took. :class:`DeliveryFailed` (no URL in it) otherwise."""
    try:
        import httpx2 as httpx
    except ImportError:  # the same API under its original name
        import httpx  # type: ignore[no-redef]

    data = json.dumps(body, ensure_ascii=False).encode("utf-8")
    headers = {"Content-Type": "application/json; charset=utf-8", "User-Agent": "runner-report-delivery"}
    where = describe(url)
    for attempt in range(1, retries + 2):
        wait = min(2.0 ** (attempt - 1), 30.0)
        try:
            response = httpx.post(url, content=data, headers=headers, timeout=timeout, follow_redirects=False)
        except httpx.HTTPError as error:
            failure = DeliveryFailed(f"POST to {where} failed: {type(error).__name__}", "connection", attempt)
        else:
            if response.status_code < 300:
                return attempt
            failure = DeliveryFailed(f"POST to {where} answered HTTP {response.status_code}", "http_status", attempt)
            if response.status_code != 429 and response.status_code < 500:
                raise failure
            wait = _retry_after(response.headers.get("retry-after"), wait)
        if attempt > retries:
            raise failure
        sleep(wait)
    raise AssertionError("unreachable")


def _retry_after(value: str | None, default: float) -> float:
    try:
        return min(max(float(value), 0.0), MAX_RETRY_AFTER) if value else default
    except ValueError:
        return default
