"""The last guard against a hung test: pytest-timeout's alarm fires once per test, so a test that
hangs again while it unwinds (a server's ``close`` waiting on a stuck thread, say) would hold the
whole run until CI's own limit, with nothing printed. The watchdog here is faulthandler's C
thread: it needs neither the GIL nor the main thread, and past the test's limit plus a grace it
prints every thread's stack to the terminal and ends the run with exit code 1."""

from __future__ import annotations

import faulthandler
import os
import sys

import pytest

GRACE_SECONDS = 60.0


def stderr_copy() -> int:
    """A descriptor of the terminal's stderr that outlives pytest's capture of fd 2."""
    return os.dup(sys.stderr.fileno())


def timeout_seconds(item: pytest.Item) -> float:
    """The test's pytest-timeout limit: its marker, else ``--timeout``, else the ini's; 0 is none."""
    marker = item.get_closest_marker("timeout")
    if marker is not None and (marker.args or "timeout" in marker.kwargs):
        limit = marker.args[0] if marker.args else marker.kwargs["timeout"]
    else:
        option = item.config.getoption("timeout", None)
        limit = option if option is not None else item.config.getini("timeout")
    return float(limit or 0)


def arm(item: pytest.Item, fd: int) -> None:
    """Start the watchdog for ``item`` (none when its timeout is off, as when debugging)."""
    limit = timeout_seconds(item)
    if limit > 0:
        faulthandler.dump_traceback_later(limit + GRACE_SECONDS, exit=True, file=fd)


def disarm() -> None:
    faulthandler.cancel_dump_traceback_later()
