"""A real PostgreSQL for the tests that run the stores on both backends.

``$RUNNER_TEST_POSTGRES_URL`` (a database the tests may create databases in) is used when
set. Otherwise a private cluster is made once per session in a temporary directory with
``initdb`` and ``pg_ctl`` (PostgreSQL's own tools, found on ``PATH`` or under
``/usr/lib/postgresql/*/bin``): it listens on a Unix socket in that directory only, so it
never meets another cluster on the machine, and it runs as the ``postgres`` user when the
tests run as root (PostgreSQL refuses root). Each test gets a database of its own.

Without PostgreSQL the ``postgresql`` cases are skipped with the reason, except under CI
(``$CI`` set: ``.ci/run`` installs it), where a cluster that does not start fails them.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.services import missing

URL_ENV = "RUNNER_TEST_POSTGRES_URL"
BACKENDS = ("sqlite", "postgresql")


def _tool(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)
    return candidates[0] if candidates else None


class Cluster:
    """A throw-away PostgreSQL cluster: ``admin_url`` reaches its ``postgres`` database."""

    def __init__(self) -> None:
        initdb, self.pg_ctl = _tool("initdb"), _tool("pg_ctl")
        if not (initdb and self.pg_ctl):
            raise FileNotFoundError("initdb/pg_ctl not found (apt-get install postgresql)")
        self.base = Path(tempfile.mkdtemp(prefix="runner-test-pg-"))
        self.data, self.socket = self.base / "data", self.base / "socket"
        self.socket.mkdir()
        self.user = self._run_as()
        if self.user:
            record = pwd.getpwnam(self.user)
            for path in (self.base, self.socket):
                os.chown(path, record.pw_uid, record.pw_gid)
        self._call(initdb, "-D", str(self.data), "-U", "runner", "--auth=trust", "-E", "UTF8", "--no-sync")
        self._options = f"-k {self.socket} -c listen_addresses='' -c fsync=off -c max_connections=200"
        self.resume()
        self.admin_url = f"postgresql://runner@/postgres?host={self.socket}"

    def stop(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):
            self._call(self.pg_ctl, "-D", str(self.data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.base, ignore_errors=True)

    def halt(self) -> None:
        """Stop the server (fast shutdown: every session is ended), keeping its data."""
        self._call(self.pg_ctl, "-D", str(self.data), "-m", "fast", "-w", "stop")

    def resume(self) -> None:
        """Start the server again after :meth:`halt`, with the options it was first started with."""
        self._call(self.pg_ctl, "-D", str(self.data), "-o", self._options, "-l", str(self.base / "log"), "-w", "start")

    def running(self) -> bool:
        """Whether the server is up (``pg_ctl status``)."""
        command = ["runuser", "-u", self.user, "--"] if self.user else []
        status = [*command, str(self.pg_ctl), "-D", str(self.data), "status"]
        return subprocess.run(status, capture_output=True, timeout=60, cwd=self.base, check=False).returncode == 0

    def restart(self) -> None:
        """Restart the server, as an administrator or a crash would: every session ends."""
        self.halt()
        self.resume()

    def _run_as(self) -> str | None:
        if os.geteuid() != 0:
            return None
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            raise FileNotFoundError("running as root and there is no 'postgres' user to run PostgreSQL as") from None
        return "postgres"

    def _call(self, *argv: str) -> None:
        command = ["runuser", "-u", self.user, "--", *argv] if self.user else list(argv)
        subprocess.run(command, check=True, capture_output=True, timeout=120, cwd=self.base)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[Cluster | None]:
    """The private cluster the tests started (``None`` when ``$RUNNER_TEST_POSTGRES_URL`` names
    a server of someone else's: tests that restart the server skip then)."""
    if os.environ.get(URL_ENV):
        yield None
        return
    try:
        cluster = Cluster()
    except (FileNotFoundError, subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        detail = exc.stderr.decode(errors="replace") if isinstance(exc, subprocess.CalledProcessError) and exc.stderr else exc
        missing(f"no PostgreSQL for the postgresql cases: {detail}")
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def postgres_admin_url(postgres_server: Cluster | None) -> str:
    """A URL of a PostgreSQL database from which test databases are created (skip if there is none)."""
    return postgres_server.admin_url if postgres_server is not None else os.environ[URL_ENV]


@pytest.fixture
def postgres_cluster(postgres_server: Cluster | None) -> Iterator[Cluster]:
    """The private cluster, for a test that stops or restarts it (running again after the test)."""
    if postgres_server is None:
        pytest.skip(f"${URL_ENV} names a server these tests must not restart")
    try:
        yield postgres_server
    finally:
        if not postgres_server.running():
            postgres_server.resume()


@pytest.fixture
def postgres_url(postgres_admin_url: str) -> Iterator[str]:
    """A fresh, empty database for one test; dropped after it."""
    import psycopg

    name = f"runner_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_admin_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    url = _with_database(postgres_admin_url, name)
    try:
        yield url
    finally:
        with psycopg.connect(postgres_admin_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _with_database(url: str, name: str) -> str:
    head, sep, query = url.partition("?")
    prefix = head.rsplit("/", 1)[0]
    return f"{prefix}/{name}{sep}{query}"


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """``sqlite`` or ``postgresql``: parametrize a test over both store backends."""
    return str(request.param)


@pytest.fixture
def store_target(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str | Path:
    """Where a store lives for this backend: an SQLite file in tmp_path, or a fresh PostgreSQL database's URL."""
    if backend == "sqlite":
        return tmp_path / "store.sqlite3"
    return str(request.getfixturevalue("postgres_url"))


def terminate(url: str, pid: int) -> None:
    """End session ``pid`` from another connection, as an administrator would, and wait until it
    is gone (``pg_terminate_backend`` only signals it: its locks may outlive the call briefly)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as admin:
        assert admin.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone() == (True,)
        for _ in range(600):  # a bound on a hang, not a speed check
            if admin.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone() == (0,):
                return
            time.sleep(0.05)
        raise AssertionError(f"backend {pid} still there 30 s after pg_terminate_backend")
