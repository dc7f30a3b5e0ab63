"""A loopback demo web for the market_scan example: a SearxNG-compatible search API and the
pages its results point to (one of them built by JavaScript), all on 127.0.0.1.

    python examples/web/site.py --port 8766       # prints its base URL, serves until killed

``GET /search?q=...&format=json`` answers in SearxNG's JSON format; the result URLs point
back at this server. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

ARTICLE_SHELL = """<!doctype html>
<html><head><title>Heat pump sales rose 14% in Q3 — Example Energy News</title></head>
<body><nav><a href="/">Example Energy News</a> · <a href="/reports/outlook">Outlook 2027</a></nav>
<main id="story">Loading the story…</main>
<script>
fetch('/api/stories/heat-pumps').then(r => r.json()).then(s => {
  document.getElementById('story').innerHTML = '<article><h1>' + s.title + '</h1>' +
    s.paragraphs.map(p => '<p>' + p + '</p>').join('') + '</article>';
});
</script></body></html>"""

STORY = {
    "title": "Heat pump sales rose 14% in Q3",
    "paragraphs": [
        "European heat pump sales rose 14% in the third quarter of 2026 compared with the second, to 812,000 units.",
        "Poland and Italy led the growth, while Germany was flat after its subsidy round closed in June.",
        "Installers report waiting lists of 6 to 8 weeks, and prices for a typical 8 kW air-to-water unit held at about 9,400 EUR installed.",
    ],
}

OUTLOOK = """<!doctype html>
<html><head><title>HVAC outlook 2027 — Example Research</title></head>
<body><article><h1>HVAC outlook 2027</h1>
<p>Installers expect demand for heat pumps to flatten in the first half of 2027 as subsidies end in three markets.</p>
<p>Gas boiler sales fell 9% in 2026 and are expected to fall again in 2027.</p>
</article></body></html>"""


def search_results(base: str, query: str) -> dict[str, Any]:
    """A SearxNG JSON answer whose results point at this server."""
    results = [
        {"url": f"{base}/news/heat-pumps", "title": "Heat pump sales rose 14% in Q3",
         "content": "European heat pump sales rose 14% in the third quarter, led by Poland and Italy.",
         "publishedDate": "2026-10-02T00:00:00", "engine": "demo", "engines": ["demo"], "score": 1.0, "category": "general"},
        {"url": f"{base}/reports/outlook", "title": "HVAC outlook 2027",
         "content": "Installers expect demand to flatten as subsidies end.",
         "publishedDate": None, "engine": "demo", "engines": ["demo"], "score": 0.5, "category": "general"},
    ]  # fmt: skip
    return {"query": query, "number_of_results": len(results), "results": results, "answers": [], "corrections": [],
            "infoboxes": [], "suggestions": [], "unresponsive_engines": []}  # fmt: skip


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        base = f"http://{self.server.server_address[0]}:{self.server.server_address[1]}"
        if parts.path == "/search":
            query = parse_qs(parts.query).get("q", [""])[0]
            return self._send(200, "application/json", json.dumps(search_results(base, query)))
        pages = {
            "/news/heat-pumps": ("text/html; charset=utf-8", ARTICLE_SHELL),
            "/api/stories/heat-pumps": ("application/json", json.dumps(STORY)),
            "/reports/outlook": ("text/html; charset=utf-8", OUTLOOK),
        }
        if parts.path in pages:
            return self._send(200, *pages[parts.path])
        self._send(404, "text/plain", "not found")

    def _send(self, status: int, content_type: str, text: str) -> None:
        body = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def serve(port: int = 0) -> ThreadingHTTPServer:
    """Start the site on 127.0.0.1:``port`` (0: any free port) in a background thread."""
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()  # shutdown() waits one poll
    return server


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--port", type=int, default=8766)
    args = parser.parse_args()
    server = serve(args.port)
    print(f"http://127.0.0.1:{server.server_address[1]}", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        stop.wait()
    except KeyboardInterrupt:
        pass
    server.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
