"""The browser's one way out: a filtering HTTP proxy on loopback that each browser context
must use, applying the agent's network policy (:mod:`runner.tools.net`) to every request
Chromium makes on its own.

The ``browse`` tab's route handler fetches what Playwright can intercept (documents, scripts,
images, a page's ``fetch``). What it cannot see (a SharedWorker's or a ServiceWorker's
requests, downloads, prefetches, WebSockets) still leaves through the context's proxy, and
only through it (``<-loopback>``: loopback included), so it meets the same checks:

* a proxied ``http://`` request is made by :func:`runner.tools.net.fetch` one hop at a time: a
  redirect goes back to Chromium, whose next request is checked again (a redirect to a private
  address is refused like a direct request);
* ``CONNECT host:port`` (``https://``, ``wss://``) is checked with
  :func:`runner.tools.net.check_destination` and tunnelled to the checked address itself,
  only when what the client sends first is a TLS handshake;
* a WebSocket upgrade over plain ``ws://`` is refused (as the route handler refuses them),
  whether sent to the proxy or in a ``CONNECT`` tunnel (how Chromium sends a worker's); a
  ``wss://`` one to a host the policy allows cannot be told from ``https://`` and passes;
* bytes count against the page's size cap, and nothing passes after the call's deadline.

Refusals are listed with the page's other refused requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from runner.errors import ToolFailure
from runner.tools.net import NetworkPolicy, check_destination, fetch

MAX_HEAD_BYTES = 64 * 1024
TLS_HANDSHAKE = b"\x16\x03"  # a TLS record of type handshake, version 3.x: how https and wss start
MAX_UPLOAD_BYTES = 10 * 1024 * 1024
_HOP = frozenset({
    "connection", "keep-alive", "proxy-connection", "proxy-authorization", "te", "trailer", "transfer-encoding",
    "upgrade", "content-length", "content-encoding", "accept-encoding", "host",
})  # fmt: skip


@dataclass
class Gate:
    """What the proxy applies now: the tab's policy, its page load (size cap, refusals) and deadline."""

    policy: NetworkPolicy
    load: Any  # runner.tools.browser.PageLoad
    deadline: float


class PolicyProxy:
    """An HTTP proxy on ``127.0.0.1`` (an ephemeral port) for one browser context."""

    def __init__(self, gate: Callable[[], Gate]):
        self._gate = gate
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``, for Playwright's ``proxy`` option."""
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def start(self) -> PolicyProxy:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            tasks = list(self._tasks)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)  # each closes its connections as it ends
            with contextlib.suppress(Exception):
                await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            gate = self._gate()
            remaining = gate.deadline - time.monotonic()
            if remaining <= 0:
                return
            async with asyncio.timeout(remaining):
                await self._one(reader, writer, gate)
        except (TimeoutError, OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
            pass
        except asyncio.CancelledError:  # close(): the context is gone; ending quietly is all that is left to do
            pass
        finally:
            self._tasks.discard(task)
            with contextlib.suppress(Exception):
                writer.close()

    async def _one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, gate: Gate) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        if len(head) > MAX_HEAD_BYTES:
            return await _reply(writer, 431, "request head too large")
        lines = head.decode("latin-1").split("\r\n")
        method, target, _ = [*lines[0].split(" ", 2), "", ""][:3]
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if ":" in line)}
        if method == "CONNECT":
            return await self._tunnel(target, reader, writer, gate)
        url = target
        if headers.get("upgrade", "").lower() == "websocket":
            return await self._refuse(writer, gate, url, "WebSockets are not allowed")
        body = b""
        if (length := int(headers.get("content-length") or 0)) > 0:
            if length > MAX_UPLOAD_BYTES:
                return await self._refuse(writer, gate, url, f"a request body over {MAX_UPLOAD_BYTES} bytes")
            body = await reader.readexactly(length)
        load = gate.load
        if load.used >= load.limit:
            return await self._refuse(writer, gate, url, f"page size cap of {load.limit} bytes reached")
        policy = replace(gate.policy, timeout_seconds=max(0.1, gate.deadline - time.monotonic()),
                         max_bytes=min(gate.policy.max_bytes, load.limit - load.used))  # fmt: skip
        sent = {k: v for k, v in headers.items() if k not in _HOP}
        try:
            response = await fetch(url, policy, method=method, headers=sent, content=body or None, follow_redirects=False)
        except ToolFailure as failure:
            return await self._refuse(writer, gate, url, str(failure))
        if response.truncated:
            return await self._refuse(writer, gate, url, f"page size cap of {load.limit} bytes reached")
        load.used += len(response.body)
        out = [f"HTTP/1.1 {response.status} {_reason(response.status)}"]
        out += [f"{k}: {v}" for k, v in response.headers.items() if k.lower() not in _HOP]
        out += [f"Content-Length: {len(response.body)}", "Connection: close", "", ""]
        writer.write("\r\n".join(out).encode("latin-1", "replace") + response.body)
        await writer.drain()

    async def _tunnel(self, target: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, gate: Gate) -> None:
        host, _, port = target.rpartition(":")
        url = f"https://{host}:{port}/"
        try:
            destination = await check_destination(url, gate.policy)
        except ToolFailure as failure:
            return await self._refuse(writer, gate, url, str(failure))
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await writer.drain()
        first = await reader.read(65536)  # the client speaks first, in TLS as in a WebSocket handshake
        if not first:  # closed unused (a preconnect Chromium did not need): nothing was asked, nothing refused
            return
        if not first.startswith(TLS_HANDSHAKE):  # Chromium tunnels a worker's plain ws:// too
            return await self._refuse(writer, gate, f"ws://{host}:{port}/", "a tunnel carries TLS only: WebSockets are not allowed")
        upstream_reader, upstream_writer = await asyncio.open_connection(str(destination.address), int(port))
        try:
            gate.load.used += len(first)
            upstream_writer.write(first)
            await asyncio.gather(_pipe(reader, upstream_writer, gate), _pipe(upstream_reader, writer, gate))
        finally:
            upstream_writer.close()

    async def _refuse(self, writer: asyncio.StreamWriter, gate: Gate, url: str, why: str) -> None:
        gate.load.refused.append(f"{url}: {why}")
        await _reply(writer, 403, "refused by runner's network policy")


async def _pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter, gate: Gate) -> None:
    """Copy bytes one way until either side ends, counting them against the page's cap."""
    load = gate.load
    with contextlib.suppress(ConnectionError):
        while chunk := await source.read(65536):
            load.used += len(chunk)
            if load.used > load.limit:
                load.refused.append(f"a tunnelled connection: page size cap of {load.limit} bytes reached")
                break
            sink.write(chunk)
            await sink.drain()
    with contextlib.suppress(Exception):
        sink.close()


async def _reply(writer: asyncio.StreamWriter, status: int, text: str) -> None:
    body = text.encode()
    writer.write(f"HTTP/1.1 {status} {_reason(status)}\r\nContent-Type: text/plain\r\nContent-Length: {len(body)}\r\n"
                 "Connection: close\r\n\r\n".encode() + body)  # fmt: skip
    await writer.drain()


def _reason(status: int) -> str:
    from http import HTTPStatus

    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Status"
