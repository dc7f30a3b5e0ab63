"""A loopback web site for the web tools' tests: search APIs in their real formats, pages,
redirects and responses that never finish. Real HTTP on 127.0.0.1, one thread per request.

    with LoopbackSite() as site:
        site.json("/search", searxng_payload)
        site.page("/app", "<html>...</html>")
        site.hang("/slow")                       # headers, half a body, then nothing
        url = site.url("/app")
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

SAMPLES = Path(__file__).parent / "tools" / "search_samples"


def sample(name: str) -> Any:
    """A provider response recorded in the provider's own format (``tests/tools/search_samples``)."""
    return json.loads((SAMPLES / f"{name}.json").read_text())


@dataclass
class Response:
    status: int = 200
    headers: dict[str, str] = field(default_factory=lambda: {"Content-Type": "text/html; charset=utf-8"})
    body: bytes = b""
    hang: bool = False  # send the headers and body, then keep the connection open


@dataclass
class Seen:
    """One request the site received."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes


class LoopbackSite:
    """Routes (path without query -> response or handler) on 127.0.0.1 (or ``host``) and an ephemeral port."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.host = host  # any 127.x address: a second site another policy range covers or not
        self.routes: dict[str, Response | Callable[[Seen], Response]] = {}
        self.requests: list[Seen] = []
        self.closing = threading.Event()
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- routes ---------------------------------------------------------------
    def json(self, path: str, payload: Any, status: int = 200) -> None:
        self.routes[path] = Response(status, {"Content-Type": "application/json"}, json.dumps(payload).encode())

    def page(self, path: str, html: str, status: int = 200) -> None:
        self.routes[path] = Response(status, body=html.encode())

    def redirect(self, path: str, location: str, status: int = 302) -> None:
        self.routes[path] = Response(status, {"Location": location}, b"")

    def hang(self, path: str, body: bytes = b"<html><body><p>Loading") -> None:
        headers = {"Content-Type": "text/html", "Content-Length": "1000000"}
        self.routes[path] = Response(200, headers, body, hang=True)

    # --- addresses --------------------------------------------------------------
    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.server_address[1])

    def url(self, path: str) -> str:
        return f"http://{self.host}:{self.port}{path}"

    def seen(self, path: str) -> list[Seen]:
        """Requests for ``path`` (query ignored)."""
        with self._lock:
            return [r for r in self.requests if r.path.split("?")[0] == path]

    # --- lifecycle --------------------------------------------------------------
    def __enter__(self) -> LoopbackSite:
        site = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _respond(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                seen = Seen(self.command, self.path, {k.lower(): v for k, v in self.headers.items()},
                            self.rfile.read(length) if length else b"")  # fmt: skip
                with site._lock:
                    site.requests.append(seen)
                route = site.routes.get(self.path.split("?")[0])
                response = route(seen) if callable(route) else route or Response(404, body=b"not found")
                self.send_response(response.status)
                for key, value in response.headers.items():
                    self.send_header(key, value)
                if "Content-Length" not in response.headers:
                    self.send_header("Content-Length", str(len(response.body)))
                self.end_headers()
                try:
                    self.wfile.write(response.body)
                    self.wfile.flush()
                    if response.hang:
                        site.closing.wait(120)
                except (BrokenPipeError, ConnectionResetError):
                    pass
                self.close_connection = True

            do_GET = do_POST = do_HEAD = _respond

            def log_message(self, format: str, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer((self.host, 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.closing.set()
        assert self._server is not None and self._thread is not None
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)
