"""Fixtures for the tools tests: sandbox-ready workspaces, contexts and a loopback HTTP server."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from runner.tools.base import ToolContext
from runner.tools.net import NetworkPolicy
from runner.tools.registry import ToolRegistry, default_registry
from runner.tools.sandbox import SandboxPolicy
from tests.support.serving import serving

CANARY = "sk-canary-123"


@pytest.fixture
def workspace() -> Iterator[Path]:
    """A workspace under /tmp (pytest's tmp_path is 0700, which uid 65534 cannot traverse)."""
    root = Path(tempfile.mkdtemp(prefix="runner-tools-ws-"))
    root.chmod(0o755)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def outside() -> Iterator[Path]:
    """A directory next to the workspace that tools must never reach."""
    root = Path(tempfile.mkdtemp(prefix="runner-tools-outside-"))
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def make_ctx(workspace: Path) -> Callable[..., ToolContext]:
    def make(**overrides: object) -> ToolContext:
        fields: dict[str, object] = {"workspace": workspace, "sandbox": SandboxPolicy(wall_seconds=20)}
        fields.update(overrides)
        return ToolContext(**fields)  # type: ignore[arg-type]

    return make


@pytest.fixture
def ctx(make_ctx: Callable[..., ToolContext]) -> ToolContext:
    return make_ctx()


@pytest.fixture
def registry() -> ToolRegistry:
    return default_registry()


@pytest.fixture
def canary(monkeypatch: pytest.MonkeyPatch) -> str:
    """A fake API key in the runner's environment that sandboxed code must never see."""
    monkeypatch.setenv("RUNNER_TEST_CANARY_KEY", CANARY)
    assert os.environ["RUNNER_TEST_CANARY_KEY"] == CANARY
    return CANARY


@dataclass
class Route:
    status: int = 200
    headers: dict[str, str] = field(default_factory=lambda: {"Content-Type": "text/plain"})
    body: bytes | Callable[[BaseHTTPRequestHandler], bytes] = b""


@dataclass
class LoopbackServer:
    """A tiny HTTP server on 127.0.0.1; ``routes`` maps a path to a canned response."""

    port: int
    routes: dict[str, Route]
    requests: list[dict[str, object]]

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    @property
    def policy(self) -> NetworkPolicy:
        """Test-only policy that exempts this server's address from the public-address rule."""
        return NetworkPolicy(allow_private_networks=("127.0.0.1/32",), timeout_seconds=10)


@pytest.fixture
def http_server() -> Iterator[LoopbackServer]:
    routes: dict[str, Route] = {}
    requests: list[dict[str, object]] = []

    class Handler(BaseHTTPRequestHandler):
        def _respond(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            requests.append({"method": self.command, "path": self.path, "headers": dict(self.headers), "body": body})
            route = routes.get(self.path.split("?")[0], Route(404, body=b"not found"))
            payload = route.body(self) if callable(route.body) else route.body
            self.send_response(route.status)
            for key, value in route.headers.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self.wfile.write(payload)

        do_GET = do_POST = do_PUT = do_DELETE = _respond

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    with serving(server):
        yield LoopbackServer(server.server_address[1], routes, requests)
