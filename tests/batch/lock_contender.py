"""One batch contending for an output's lock object, as a process of its own:
``python lock_contender.py TARGET GO DONE LEASE HEARTBEAT [HOST]``.

Waits until the file ``GO`` exists (so several contenders start together), then tries to take
the lock of the output ``TARGET`` (a URL). Prints ``refused``, or ``won`` and then holds it
until the file ``DONE`` exists or the lock is lost, printing ``held`` or ``lost: <why>``.
``HOST`` makes it look like a process of another machine sharing the filesystem (its pid
cannot be seen from here, so only its lease tells whether it is alive).
"""

from __future__ import annotations

import os
import socket
import sys
import time


def main(target: str, go: str, done: str, lease: str, heartbeat: str, host: str | None = None) -> None:
    if host:
        socket.gethostname = lambda: host  # type: ignore[assignment]
    from runner.batch.output_lock import exclusive_url_output
    from runner.errors import OutputLockLost, UsageError
    from runner.locations import location

    while not os.path.exists(go):
        time.sleep(0.005)
    try:
        with exclusive_url_output(location(target), {"task": f"contender {os.getpid()}"}, lease_seconds=float(lease),  # type: ignore[arg-type]
                                  heartbeat_seconds=float(heartbeat)) as hold:  # fmt: skip
            print("won", flush=True)
            while not os.path.exists(done) and hold.lost is None:
                time.sleep(0.02)
            try:
                hold.check()
                print("held", flush=True)
            except OutputLockLost as exc:
                print(f"lost: {exc}", flush=True)
    except UsageError:
        print("refused", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
