"""An SMTP conversation a server cannot hold: a wall-clock deadline and a cap on what it sends.

``smtplib``'s ``timeout`` bounds each socket operation, not the conversation: a server that
sends its greeting one byte at a time, or an endless multi-line reply (``250-...`` forever),
keeps a delivery going for as long as it likes, and the reply lines pile up in memory. Here
a watchdog shuts the socket down when the deadline passes, which wakes whatever read or
write is blocked on it (the TLS handshake too), and the replies of one conversation may
total at most :data:`MAX_REPLY_BYTES`.
"""

from __future__ import annotations

import contextlib
import smtplib
import socket
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any

MAX_REPLY_BYTES = 1 << 20
"""All the replies of one conversation together (an EHLO answer is a few hundred bytes)."""
SOCKET_MARGIN_SECONDS = 5.0
"""How much longer than the deadline a single socket operation may wait: the watchdog is the
conversation's one clock. With the same timeout on both, a read's own timeout could fire first
on a loaded machine, and ``smtplib`` reports it as a disconnection
(``SMTPServerDisconnected``), not as the deadline it is. Only a connect, which the watchdog
cannot cut (there is no socket to shut down yet), lasts up to this much past the deadline."""


class ConversationExpired(OSError):
    """The deadline passed, or the server sent more than :data:`MAX_REPLY_BYTES`."""


class _Watchdog:
    """Shuts the client's socket down once ``seconds`` have passed (from another thread)."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.expired = False
        self.client: smtplib.SMTP | None = None
        self._timer = threading.Timer(seconds, self._cut)
        self._timer.daemon = True

    def start(self) -> None:
        self._timer.start()

    def cancel(self) -> None:
        self._timer.cancel()

    def _cut(self) -> None:
        self.expired = True
        sock = getattr(self.client, "sock", None)
        if sock is not None:
            with contextlib.suppress(OSError):  # already closed
                sock.shutdown(socket.SHUT_RDWR)


class _CappedReplies:
    """The client's reply stream, refusing to read past the conversation's byte budget."""

    def __init__(self, inner: IO[bytes], budget: list[int]):
        self.inner, self.budget = inner, budget

    def readline(self, limit: int = -1) -> bytes:
        line = self.inner.readline(limit)
        self.budget[0] -= len(line)
        if self.budget[0] < 0:
            raise ConversationExpired(f"the server sent more than {MAX_REPLY_BYTES} bytes of replies")
        return line

    def close(self) -> None:
        self.inner.close()


class _Bounded:
    """Mixed into ``smtplib.SMTP`` and ``SMTP_SSL``: registers with the watchdog before
    connecting, and reads replies through the byte budget."""

    sock: Any
    file: Any

    def __init__(self, host: str, port: int, *, timeout: float, watchdog: _Watchdog, **kwargs: Any):
        watchdog.client = self  # type: ignore[assignment]
        self._reply_budget = [MAX_REPLY_BYTES]
        super().__init__(host, port, timeout=timeout, **kwargs)  # type: ignore[call-arg]  # connects

    def getreply(self) -> tuple[int, bytes]:
        if self.file is None and self.sock is not None:
            self.file = _CappedReplies(self.sock.makefile("rb"), self._reply_budget)
        return super().getreply()  # type: ignore[misc,no-any-return]


class BoundedSMTP(_Bounded, smtplib.SMTP):
    """Plain SMTP (upgraded with STARTTLS by the caller), bounded."""


class BoundedSMTPSSL(_Bounded, smtplib.SMTP_SSL):
    """SMTP over TLS from the first byte (port 465), bounded."""


@contextmanager
def conversation(
    host: str, port: int, *, implicit_tls: bool, timeout: float, context: ssl.SSLContext
) -> Iterator[smtplib.SMTP]:
    """A connected client whose whole conversation (connect, TLS, login, the message, QUIT)
    must end within ``timeout`` seconds. Raises :class:`ConversationExpired` when it did not."""
    watchdog = _Watchdog(timeout)
    watchdog.start()
    each = timeout + SOCKET_MARGIN_SECONDS
    try:
        if implicit_tls:
            client: smtplib.SMTP = BoundedSMTPSSL(host, port, timeout=each, watchdog=watchdog, context=context)
        else:
            client = BoundedSMTP(host, port, timeout=each, watchdog=watchdog)
        if watchdog.expired:  # the connect outlasted the deadline: the watchdog found no socket to cut
            client.close()
            raise ConversationExpired(f"no connection within {timeout:g} s (timeout_seconds)")
        with client:
            yield client
    except (OSError, smtplib.SMTPException) as error:
        if watchdog.expired:
            raise ConversationExpired(f"no complete answer within {timeout:g} s (timeout_seconds)") from error
        raise
    finally:
        watchdog.cancel()
