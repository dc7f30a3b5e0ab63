"""A real OTLP receiver for the trace tests: Arize Phoenix (``pip install arize-phoenix``),
started per test module on loopback ports, read back through its REST API.

Phoenix pins versions that clash with Airflow's, so it lives in its own virtualenv:
``.venv-phoenix/bin/phoenix`` in the repository (``.ci/run`` makes it), or the executable
named by ``RUNNER_PHOENIX``, or ``phoenix`` on the PATH. Without one the tests skip, except
under CI (``CI`` set), where a missing receiver fails them.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import IO, Any

from tests.support.services import missing

REPO = Path(__file__).resolve().parents[2]


def phoenix_executable() -> str:
    found = os.environ.get("RUNNER_PHOENIX") or shutil.which("phoenix")
    local = REPO / ".venv-phoenix" / "bin" / "phoenix"
    if not found and local.exists():
        found = str(local)
    if not found:
        message = "no Arize Phoenix: python3 -m venv .venv-phoenix && .venv-phoenix/bin/pip install arize-phoenix"
        missing(message)
    return found


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Phoenix:
    """One Phoenix server process on loopback; a context manager."""

    def __init__(self, executable: str, work_dir: Path):
        self.executable, self.work_dir = executable, work_dir
        self.port, self.grpc_port = free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None
        self.log: IO[bytes] | None = None

    def __enter__(self) -> Phoenix:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PHOENIX_"))}
        env.update(PHOENIX_WORKING_DIR=str(self.work_dir), PHOENIX_PORT=str(self.port), PHOENIX_HOST="127.0.0.1",
                   PHOENIX_GRPC_PORT=str(self.grpc_port), PHOENIX_TELEMETRY_ENABLED="false")
        self.log = open(self.work_dir / "phoenix.log", "wb")
        self.process = subprocess.Popen([self.executable, "serve"], env=env, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self.__exit__()
                raise RuntimeError(f"phoenix exited: {(self.work_dir / 'phoenix.log').read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/healthz", timeout=2) as reply:
                    if reply.status == 200:
                        return self
            except OSError:
                time.sleep(0.5)
        self.__exit__()
        raise RuntimeError("phoenix did not start within 180 s")

    def __exit__(self, *exc_info: object) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=30)
        if self.log is not None:
            self.log.close()
            self.log = None

    def spans(self, project: str, *, at_least: int, timeout: float = 60) -> list[dict[str, Any]]:
        """The spans Phoenix stored for ``project``, waiting until there are ``at_least``."""
        deadline, found = time.monotonic() + timeout, []
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{self.url}/v1/projects/{project}/spans?limit=1000", timeout=10) as reply:
                    found = json.load(reply)["data"]
            except urllib.error.HTTPError as exc:
                if exc.code != 404:  # the project appears with its first span
                    raise
            if len(found) >= at_least:
                return list(found)
            time.sleep(0.5)
        return list(found)
