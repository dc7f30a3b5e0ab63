"""An Airflow ``execution_timeout`` that stops a runner run the way Ctrl-C does, not mid-statement.

Airflow enforces ``execution_timeout`` in the task process with ``SIGALRM``: its handler
raises ``AirflowTaskTimeout`` in whatever Python frame the main thread is executing. While
the runner waits on the network (the usual case) that frame is the event loop's ``select``
and the run is cancelled cleanly. But when the alarm lands inside a coroutine -- a batch
row parsing a reply, a journal write, a pipeline step -- the exception belongs to that one
row or step: the batch engine records the row as crashed and *goes on with the other rows
past the deadline*, and a pipeline wraps it in an ``ExceptionGroup`` that Airflow's
timeout handling does not recognise (no ``on_kill``).

:func:`timeouts_cancel_the_run` installs a ``SIGALRM`` handler for the runner's work that
turns the alarm into a cancellation of every task of the running event loop, scheduled on the
loop itself (so no row's code sees a foreign exception). The runner treats a cancellation as
an interruption: rows in flight are journalled ``interrupted``, cap reservations are settled
as spend, the run record says why it stopped; then Airflow's own handler raises
``AirflowTaskTimeout`` as before, so retries, ``on_kill`` and the task log are Airflow's. If
the work has not wound down :data:`GRACE_SECONDS` after the alarm, Airflow's handler runs at
once (a run stuck in a blocking call is still stopped).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

GRACE_SECONDS = 30.0
"""How long a cancelled run may take to record its interruption before Airflow's timeout is raised anyway."""

AlarmHandler = Callable[[int, FrameType | None], Any]


class _Alarm:
    """The state of one guarded block: whether (and how often) the alarm fired."""

    def __init__(self, airflow_handler: AlarmHandler) -> None:
        self.airflow_handler = airflow_handler
        self.fired = 0

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        self.fired += 1
        loop = _running_loop()
        if self.fired > 1 or loop is None:  # nothing to cancel (yet), or the grace ran out
            self.airflow_handler(signum, frame)
            return
        # runs between callbacks, never inside a row's code; threadsafe: it also wakes a loop
        # asleep in select(), which the interrupted call resumes after this handler
        loop.call_soon_threadsafe(_cancel_every_task, loop, "execution_timeout")
        signal.setitimer(signal.ITIMER_REAL, GRACE_SECONDS)

    def raise_timeout(self) -> None:
        """Raise what Airflow raises for its timeout (its handler logs and raises it)."""
        signal.setitimer(signal.ITIMER_REAL, 0)
        self.airflow_handler(signal.SIGALRM, None)


@contextlib.contextmanager
def timeouts_cancel_the_run() -> Iterator[None]:
    """Guard a block that runs the runner's event loop in this (main) thread; see the module.

    Without an alarm handler of Airflow's (no ``execution_timeout``, not the main thread, a
    loop already running here) the block runs unguarded."""
    if threading.current_thread() is not threading.main_thread() or _running_loop() is not None:
        yield
        return
    airflow_handler = signal.getsignal(signal.SIGALRM)
    if not callable(airflow_handler):
        yield
        return
    alarm = _Alarm(airflow_handler)
    signal.signal(signal.SIGALRM, alarm)
    try:
        yield
    except BaseException:  # the cancellation (or what the run made of it) after our alarm is the timeout
        signal.signal(signal.SIGALRM, airflow_handler)
        if alarm.fired:
            alarm.raise_timeout()
        raise
    signal.signal(signal.SIGALRM, airflow_handler)
    if alarm.fired:  # the work finished on its own after the alarm: the deadline still passed
        alarm.raise_timeout()


def cancel_the_running_run() -> bool:
    """Cancel the run whose event loop runs in this thread, as Ctrl-C does; ``False`` when none does.

    For an operator's ``on_kill``: Airflow calls it from its ``SIGTERM`` handler in the task's
    main thread (a running task marked failed or cleared, a worker shutting down), a few seconds
    before it kills the process. Cancelled, the run records why it stopped and settles what its
    calls reserved, rather than leave that to the next try as a dead worker's."""
    loop = _running_loop()
    if loop is None:
        return False
    loop.call_soon_threadsafe(_cancel_every_task, loop, "killed")  # wakes the loop if it sleeps in select()
    return True


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _cancel_every_task(loop: asyncio.AbstractEventLoop, why: str) -> None:
    """What ``asyncio.run`` does to what is left when its main coroutine raises, done now."""
    for task in asyncio.all_tasks(loop):
        task.cancel(why)
