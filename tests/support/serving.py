"""Loopback servers of the standard library, served from a thread for the length of a ``with`` block.

``serve_forever`` checks for a shutdown request every ``poll_interval`` (0.5 s by default), so
every test server stopped with ``shutdown()`` used to wait up to half a second at teardown;
:func:`serving` polls every 20 ms instead.
"""

from __future__ import annotations

import contextlib
import socketserver
import threading
from collections.abc import Iterator
from typing import TypeVar

POLL_SECONDS = 0.02
"""How often a serving thread looks for a shutdown request: the most a teardown waits."""

Server = TypeVar("Server", bound=socketserver.BaseServer)


@contextlib.contextmanager
def serving(server: Server) -> Iterator[Server]:
    """Serve ``server`` from a daemon thread; shut it down and close its socket when the block ends."""
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": POLL_SECONDS}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
