"""Sending spans to a receiver that may misbehave: said once, never waited on without bound.

The OTLP/HTTP exporter retries within its timeout and logs each failure; a receiver that
hangs, drips its answer, answers 500 or garbage, resets the connection or is not there must
not hold a run, flood its log, or grow its memory. So:

- :class:`AnswerIgnoringSession` sends each export with ``requests`` but never reads the
  answer's body (the status is all OTLP needs here), so an endless body costs nothing;
- :class:`ReportingExporter` notes how exports fail and says so once per process, in our
  words (the receiver's own text is not repeated, its address without user info or query);
- :func:`bounded` runs a flush or a shutdown in a helper thread and stops waiting after a
  deadline: a blocked export is abandoned with its thread when the process ends.
"""

from __future__ import annotations

import logging
import math
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlsplit

import requests
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

DEFAULT_TIMEOUT = 10.0
"""OpenTelemetry's default export timeout (``OTEL_EXPORTER_OTLP_TIMEOUT``), in seconds."""
MAX_WAIT_AT_EXIT = 30.0
"""However long the timeout variable says, a process waits at most this long for its spans."""
AFTER_A_FAILURE = 1.0
"""Once an export has failed, the last flush waits only this long: the receiver is down."""
QUIET_LOGGERS = ("opentelemetry.exporter", "opentelemetry.sdk._shared_internal", "opentelemetry.sdk.trace.export")
"""The exporter's and batch processor's loggers: a line per retry and per dropped span."""


def export_timeout(environ: Any = None) -> float:
    """The export timeout the OTLP exporter will use (seconds; its default when unset or unusable)."""
    env = os.environ if environ is None else environ
    raw = env.get("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT") or env.get("OTEL_EXPORTER_OTLP_TIMEOUT")
    try:
        value = float(raw) if raw else DEFAULT_TIMEOUT
    except ValueError:
        return DEFAULT_TIMEOUT
    return value if math.isfinite(value) and value > 0 else DEFAULT_TIMEOUT


def describe_endpoint(endpoint: str | None, environ: Any = None) -> str:
    """Where spans go, as shown to a person: scheme, host, port and path (no user info, no query)."""
    env = os.environ if environ is None else environ
    if endpoint is None:
        traces = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
        base = env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
        endpoint = traces or (base.rstrip("/") + "/v1/traces" if base else "http://localhost:4318/v1/traces")
    try:
        parts = urlsplit(endpoint)
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "an unusable URL"
    return f"{parts.scheme}://{parts.hostname or ''}{port}{parts.path}"


class AnswerIgnoringSession(requests.Session):
    """A ``requests`` session that never reads an answer's body and remembers how the last
    request went (``outcome``, in our words)."""

    def __init__(self) -> None:
        super().__init__()
        self.outcome = ""
        self.failed = False  # some request failed (the exporter may still be retrying)

    def request(self, method: str, url: str | bytes, *args: Any, **kwargs: Any) -> requests.Response:  # type: ignore[override]
        kwargs["stream"] = True
        try:
            response = super().request(method, url, *args, **kwargs)
        except requests.Timeout:
            self._note("the receiver did not answer in time", failed=True)
            raise
        except requests.ConnectionError:
            self._note("the receiver could not be reached, or dropped the connection", failed=True)
            raise
        except (requests.RequestException, ValueError, OSError):
            self._note("the request could not be made (check the endpoint URL)", failed=True)
            raise
        response._content = b""  # what .content would read from the network (an endless body, maybe)
        response.close()
        self._note(f"the receiver answered HTTP {response.status_code}", failed=response.status_code >= 300)
        return response

    def _note(self, outcome: str, *, failed: bool) -> None:
        self.outcome = outcome
        self.failed = self.failed or failed


class ReportingExporter(SpanExporter):
    """Wraps the OTLP exporter: counts spans that did not get through, says so once."""

    def __init__(self, inner: SpanExporter, where: str, session: AnswerIgnoringSession, say: Callable[[str], None] | None = None):
        self.inner, self.where, self.session = inner, where, session
        self.say = say or _to_stderr
        self.lost = 0
        self._said = False
        self._lock = threading.Lock()

    @property
    def failed(self) -> bool:
        """Whether spans were lost, or a request failed (the exporter may still be retrying)."""
        return self.lost > 0 or self.session.failed

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            result = self.inner.export(spans)
        except Exception:  # an exporter bug must not end the batch processor's thread
            self.session.outcome = self.session.outcome or "the exporter failed"
            result = SpanExportResult.FAILURE
        if result is not SpanExportResult.SUCCESS:
            self.lost += len(spans)
            self.tell(self.session.outcome or "the export failed")
        return result

    def tell(self, why: str) -> None:
        """Say, the first time only, that spans are not reaching the receiver and why."""
        with self._lock:
            if self._said:
                return
            self._said = True
        self.say(
            f"traces: spans were not exported to {self.where}: {why}. Runs are not affected; later spans of this "
            "process may be lost too. Check the receiver, or unset OTEL_EXPORTER_OTLP_ENDPOINT (or the Telemetry "
            "document's endpoint) to turn traces off."
        )

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


def bounded(action: Callable[[], object], seconds: float, failing: Callable[[], bool] = lambda: False) -> bool:
    """Run ``action`` in a daemon thread and wait at most ``seconds`` (at most
    :data:`AFTER_A_FAILURE` more once ``failing()`` says the receiver is failing, since retries
    of a receiver that is down only add waiting); whether it finished."""
    worker = threading.Thread(target=action, name="runner-trace-flush", daemon=True)
    worker.start()
    deadline = time.monotonic() + seconds
    while worker.is_alive() and (left := deadline - time.monotonic()) > 0:
        if failing():
            deadline = min(deadline, time.monotonic() + AFTER_A_FAILURE)
        worker.join(min(left, 0.05))
    return not worker.is_alive()


def quiet_exporter_logs() -> None:
    """Keep the exporter's per-retry and per-span lines out of the run's output: the
    :class:`ReportingExporter` says once what they would say many times."""
    for name in QUIET_LOGGERS:
        logger = logging.getLogger(name)
        logger.propagate = False
        if not any(isinstance(h, logging.NullHandler) for h in logger.handlers):
            logger.addHandler(logging.NullHandler())


def _to_stderr(message: str) -> None:
    try:
        sys.stderr.write(message + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):  # stderr closed (a daemonised process)
        pass
