"""Servers that misbehave on purpose, at the TCP level, for the hostile-endpoint tests.

Each connection is handed to a behaviour (a function of the accepted socket) in its own
daemon thread; the listener and every socket it accepted are closed when the block ends.

    with HostileServer(drip(b"HTTP/1.1 200 OK\\r\\n")) as server:
        url = f"http://127.0.0.1:{server.port}/hook"

Behaviours that never end on their own (``silent``, ``drip``, ``flood``) are what a test
relies on: a client that did not bound its wait would hang the test until pytest's timeout.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable
from types import TracebackType

Behaviour = Callable[[socket.socket], None]


class HostileServer:
    """A listener on 127.0.0.1 and an ephemeral port; counts the connections it accepted."""

    def __init__(self, behaviour: Behaviour):
        self.behaviour = behaviour
        self.connections = 0
        self.received: list[bytes] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._accepted: list[socket.socket] = []
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> HostileServer:
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self._closed.set()
        self._listener.close()
        for sock in list(self._accepted):
            with contextlib.suppress(OSError):
                sock.close()

    def _serve(self) -> None:
        while not self._closed.is_set():
            try:
                sock, _ = self._listener.accept()
            except OSError:
                return
            self.connections += 1
            self._accepted.append(sock)
            threading.Thread(target=self._handle, args=(sock,), daemon=True).start()

    def _handle(self, sock: socket.socket) -> None:
        with contextlib.suppress(OSError):  # the client went away (what a bounded client does)
            self.behaviour(sock)

    def stopped(self) -> bool:
        return self._closed.is_set()


def read_request(sock: socket.socket, limit: int = 1 << 20) -> bytes:
    """What the client sent first: an HTTP request's head and the body its Content-Length names."""
    data = b""
    while b"\r\n\r\n" not in data and len(data) < limit:
        chunk = sock.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        (int(line.split(b":", 1)[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")), 0
    )
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return head + b"\r\n\r\n" + body


def silent(sock: socket.socket) -> None:
    """Accept, read whatever comes, never answer."""
    while sock.recv(65536):
        pass
    time.sleep(3600)


def answer(raw: bytes, *, read_first: bool = True, then_hang: bool = False) -> Behaviour:
    """Read the request (when ``read_first``), send ``raw``, close (or keep the connection open)."""

    def behave(sock: socket.socket) -> None:
        if read_first:
            read_request(sock)
        sock.sendall(raw)
        if then_hang:
            time.sleep(3600)
        sock.close()

    return behave


def drip(head: bytes, filler: bytes = b"a", every: float = 0.2, *, read_first: bool = True) -> Behaviour:
    """Send ``head``, then ``filler`` one chunk at a time forever: each read is answered in
    time, so only a deadline on the whole exchange ends it."""

    def behave(sock: socket.socket) -> None:
        if read_first:
            read_request(sock)
        sock.sendall(head)
        while True:
            sock.sendall(filler)
            time.sleep(every)

    return behave


def flood(head: bytes, chunk: bytes, *, read_first: bool = True) -> Behaviour:
    """Send ``head``, then ``chunk`` as fast as the client takes it, forever."""

    def behave(sock: socket.socket) -> None:
        if read_first:
            read_request(sock)
        sock.sendall(head)
        while True:
            sock.sendall(chunk)

    return behave


def reset(sock: socket.socket) -> None:
    """Read the request, then reset the connection (RST, not FIN)."""
    read_request(sock)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    sock.close()


def unused_port() -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
