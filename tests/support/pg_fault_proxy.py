"""A TCP proxy in front of a real PostgreSQL server that fails like a network does.

Tests connect to the proxy instead of the server. It forwards bytes both ways and reads the
server's messages (PostgreSQL's wire protocol: a type byte, a 4-byte length), so it can cut
a connection at a chosen moment:

* :meth:`FaultProxy.cut_after` - after the server has answered a statement whose command tag
  starts with ``tag`` (``"COMMIT"``, ``"INSERT"``, ``"UPDATE"``) and said it is ready for the
  next (``ReadyForQuery``, sent once a lone statement or a ``COMMIT`` has committed): the
  server did the work and committed, the client never hears so. This is the one fault a
  retry must not repeat. (Inside a transaction the statement is not committed yet: the
  server rolls it back when the line goes.)
* :meth:`FaultProxy.cut_all` - every open connection at once (a network blip).

The proxied URL disables TLS and GSS encryption negotiation, so the stream is typed from the
first message.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit


class FaultProxy:
    """A proxy to the server of ``url``; use as a context manager, connect with :attr:`url`."""

    def __init__(self, url: str) -> None:
        from psycopg.conninfo import conninfo_to_dict

        self._target = conninfo_to_dict(url)
        self._source_url = url
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._lock = threading.Lock()
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._armed: list[str] = []
        self.cuts = 0  # connections cut so far

    @property
    def url(self) -> str:
        """The server's URL, through the proxy."""
        parts = urlsplit(self._source_url)
        user = str(self._target.get("user") or "")
        password = f":{parts.password}" if parts.password else ""
        netloc = f"{user}{password}@127.0.0.1:{self._listener.getsockname()[1]}"
        return urlunsplit(("postgresql", netloc, parts.path, "sslmode=disable&gssencmode=disable", ""))

    def __enter__(self) -> FaultProxy:
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._listener.close()
        self.cut_all()

    def cut_after(self, tag: str, times: int = 1) -> None:
        """Cut the connection once the server has answered the next ``times`` statements whose
        command tag starts with ``tag`` and is ready for more, without passing any of it on."""
        with self._lock:
            self._armed.extend([tag] * times)

    @property
    def armed(self) -> int:
        """Cuts still waiting for their statement."""
        with self._lock:
            return len(self._armed)

    def cut_all(self) -> None:
        """Cut every open connection."""
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for pair in pairs:
            _close(pair)

    # --- plumbing ------------------------------------------------------------------------

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                client, _ = self._listener.accept()
                server = self._connect()
                with self._lock:
                    self._pairs.append((client, server))
                threading.Thread(target=self._upstream, args=(client, server), daemon=True).start()
                threading.Thread(target=self._downstream, args=(client, server), daemon=True).start()

    def _connect(self) -> socket.socket:
        host = str(self._target.get("host") or "/var/run/postgresql")
        port = int(self._target.get("port") or 5432)
        if host.startswith("/"):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.connect(f"{host}/.s.PGSQL.{port}")
            return sock
        return socket.create_connection((host, port))

    def _upstream(self, client: socket.socket, server: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := client.recv(65536):
                server.sendall(data)
        _close((client, server))

    def _downstream(self, client: socket.socket, server: socket.socket) -> None:
        buffer, cutting = b"", False
        with contextlib.suppress(OSError):
            while data := server.recv(65536):
                buffer += data
                for message, rest in _messages(buffer):
                    buffer = rest
                    cutting = cutting or self._cut_here(message)
                    if cutting and message[:1] == b"Z":  # ReadyForQuery: what came before it is done
                        self.cuts += 1
                        _close((client, server))
                        return
                    if not cutting:
                        client.sendall(message)
        _close((client, server))

    def _cut_here(self, message: bytes) -> bool:
        if message[:1] != b"C":  # CommandComplete
            return False
        tag = message[5:].rstrip(b"\x00").decode(errors="replace")
        with self._lock:
            for index, armed in enumerate(self._armed):
                if tag.startswith(armed):
                    del self._armed[index]
                    return True
        return False


def _messages(buffer: bytes) -> Iterator[tuple[bytes, bytes]]:
    """Whole messages at the front of ``buffer``, each with what is left after it."""
    while len(buffer) >= 5:
        (length,) = struct.unpack("!I", buffer[1:5])
        if len(buffer) < 1 + length:
            return
        yield buffer[: 1 + length], buffer[1 + length :]
        buffer = buffer[1 + length :]


def _close(pair: tuple[socket.socket, socket.socket]) -> None:
    for sock in pair:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            sock.close()
