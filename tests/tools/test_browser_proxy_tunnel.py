"""The browser proxy's ``CONNECT`` tunnels carry TLS only: Chromium tunnels a worker's plain
``ws://`` WebSocket through ``CONNECT`` (the route handler never sees it), and a tunnel to an
allowed host would otherwise have carried the upgrade. Checked on raw bytes against a loopback
server that records what reaches it; no browser needed."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from runner.tools.browser import PageLoad
from runner.tools.browser_proxy import Gate, PolicyProxy
from runner.tools.net import NetworkPolicy

LOOPBACK = NetworkPolicy(allow_private_networks=("127.0.0.1/32",), timeout_seconds=10)


class EchoServer:
    """Echoes what it is sent on 127.0.0.1, keeping every byte it received."""

    def __init__(self) -> None:
        self.received = bytearray()
        self.connections: list[asyncio.StreamWriter] = []

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections.append(writer)
        while data := await reader.read(65536):
            self.received += data
            writer.write(data)
            await writer.drain()


@pytest.fixture
async def echo() -> AsyncIterator[tuple[EchoServer, int]]:
    server = EchoServer()
    listening = await asyncio.start_server(server.serve, "127.0.0.1", 0)
    yield server, listening.sockets[0].getsockname()[1]
    listening.close()
    for writer in server.connections:
        writer.close()
        await writer.wait_closed()
    await listening.wait_closed()


async def tunnel(port: int, first: bytes, load: PageLoad) -> bytes:
    """What comes back through a ``CONNECT 127.0.0.1:PORT`` tunnel that starts with ``first``."""
    proxy = await PolicyProxy(lambda: Gate(LOOPBACK, load, time.monotonic() + 10)).start()
    host, proxy_port = proxy.url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(proxy_port))
    try:
        writer.write(f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
        assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200")
        writer.write(first)
        await writer.drain()
        return await asyncio.wait_for(reader.read(65536), 10)
    finally:
        writer.close()
        await writer.wait_closed()
        await proxy.close()


async def test_a_tls_handshake_is_tunnelled_to_an_allowed_host(echo: tuple[EchoServer, int]) -> None:
    server, port = echo
    hello = b"\x16\x03\x01\x00\x05hello"  # how a TLS ClientHello record starts
    load = PageLoad(limit=1_000_000)
    assert await tunnel(port, hello, load) == hello
    assert bytes(server.received) == hello and load.refused == []


async def test_a_plain_websocket_upgrade_in_a_tunnel_is_refused_before_it_connects(echo: tuple[EchoServer, int]) -> None:
    server, port = echo
    upgrade = (f"GET /socket HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n").encode()  # fmt: skip
    load = PageLoad(limit=1_000_000)
    answer = await tunnel(port, upgrade, load)
    assert answer.startswith(b"HTTP/1.1 403")
    assert server.received == b""
    assert load.refused == [f"ws://127.0.0.1:{port}/: a tunnel carries TLS only: WebSockets are not allowed"]


async def test_a_tunnel_closed_before_a_byte_is_sent_is_no_refusal(echo: tuple[EchoServer, int]) -> None:
    server, port = echo
    load = PageLoad(limit=1_000_000)
    proxy = await PolicyProxy(lambda: Gate(LOOPBACK, load, time.monotonic() + 10)).start()
    host, proxy_port = proxy.url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(proxy_port))
    try:
        writer.write(f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
        assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200")
        writer.write_eof()  # Chromium closes a preconnected tunnel it did not need
        assert await asyncio.wait_for(reader.read(65536), 10) == b""
    finally:
        writer.close()
        await writer.wait_closed()
        await proxy.close()
    assert load.refused == [] and server.connections == []
