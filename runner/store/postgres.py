"""The PostgreSQL :class:`~runner.store.database.Database`: one psycopg 3 connection that
comes back when the server drops it.

A connection drops when the server restarts, when an administrator ends the session
(``pg_terminate_backend``) or on a network blip. Then the statement that met the drop, if it
may be sent again (a read, a write declared idempotent, or an :meth:`~Database.atomic` unit,
after its ``check`` found the lost try had not committed), runs again on a new connection:
tried at once, then with a doubling pause (:class:`Reconnect`), for a bounded time.
Whatever the session held is set up again on each new connection by the hooks registered
with :meth:`PostgresDatabase.on_reconnect` (session settings, a journal's advisory lock),
which may refuse (another process took the lock meanwhile); a refusal closes the new
connection, so every later statement is refused the same way. When the server stays away,
:class:`~runner.errors.StoreUnavailable` names the store (password redacted) and the fix.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from runner.errors import StoreUnavailable, UsageError
from runner.redact import redact
from runner.store.database import Database, Dialect, placeholders, redacted_url, storable, url_password
from runner.store.schema import Schema

RECONNECT_ENV = "RUNNER_STORE_RECONNECT_SECONDS"
"""How many seconds a dropped store connection is tried again before the command gives up."""
_LOST_STATES = ("57P01", "57P02", "57P03")  # admin shutdown, crash shutdown, cannot connect now (starting up)
T = TypeVar("T")
log = logging.getLogger("runner.store")


_CREATED = re.compile(r"CREATE\s+(?:UNIQUE\s+)?(?:TABLE|INDEX)\s+IF\s+NOT\s+EXISTS\s+(\w+)", re.IGNORECASE)
"""The name a schema statement creates (a table or an index)."""


@dataclass(frozen=True)
class Reconnect:
    """How a dropped connection is tried again: at once, then after ``first_delay`` seconds,
    doubling up to ``max_delay``, until ``give_up_after`` seconds have passed since the drop."""

    give_up_after: float = 120.0
    first_delay: float = 0.1
    max_delay: float = 5.0

    @classmethod
    def from_env(cls) -> Reconnect:
        """The default, or ``$RUNNER_STORE_RECONNECT_SECONDS`` (a non-negative number) as ``give_up_after``."""
        raw = os.environ.get(RECONNECT_ENV)
        if not raw:
            return cls()
        try:
            seconds = float(raw)
        except ValueError:
            seconds = -1.0
        if not 0 <= seconds < float("inf"):
            raise UsageError(f"${RECONNECT_ENV}={raw!r}: give a number of seconds (0 or more), e.g. 120")
        return cls(give_up_after=seconds)


class PostgresDatabase(Database):
    """A PostgreSQL connection (psycopg 3, autocommit), shared by every worker that names the same URL.

    Text PostgreSQL cannot hold (NUL characters, lone surrogates from invalid UTF-8) is
    stored as visible escapes (``\\x00``, ``\\udcff``), so a hostile value is kept, not fatal.
    """

    dialect: Dialect = "postgresql"
    lock_rows = " FOR UPDATE"

    def __init__(self, url: str, *, application_name: str = "runner", reconnect: Reconnect | None = None) -> None:
        super().__init__()
        self.url = url
        self.where = redacted_url(url)
        self.application_name = application_name
        self.reconnect = reconnect or Reconnect.from_env()
        self.reconnects = 0  # how many times the connection came back (for logs and tests)
        self._hooks: list[Callable[[Database], object]] = []
        self._closed = False  # closed on purpose: never reconnected
        self._guarded = threading.local()  # inside a retried unit: its statements are not retried one by one
        try:
            import psycopg
        except ImportError:  # pragma: no cover - psycopg is in the postgres extra
            raise UsageError(
                f"the store {self.where} is PostgreSQL, but psycopg is not installed: pip install 'runner[postgres]'"
            ) from None
        try:
            self._db = self._connect()
        except psycopg.ProgrammingError as exc:  # a malformed URL or option
            raise UsageError(f"cannot use the store {self.where}: {self._clean_error(exc)}") from None
        except psycopg.Error as exc:
            raise StoreUnavailable(f"cannot connect to the store {self.where}: {self._clean_error(exc)}") from None

    def on_reconnect(self, hook: Callable[[Database], object]) -> None:
        """Run ``hook`` on every new connection after a drop, before anything else is sent
        (re-take a session's advisory lock, re-apply a session setting). It may raise."""
        self._hooks.append(hook)

    @property
    def session_pid(self) -> int:
        """The server process of the current connection (what ``pg_terminate_backend`` takes)."""
        return int(self._db.info.backend_pid)

    @contextlib.contextmanager
    def _outermost(self) -> Iterator[None]:
        with self._db.transaction():
            yield

    def close(self) -> None:
        with self._lock, contextlib.suppress(Exception):
            self._closed = True
            self._db.close()

    # --- statements ---------------------------------------------------------------------------

    def _cursor(self, sql: str, params: Sequence[Any]) -> Any:
        return self._db.execute(placeholders(sql), storable(params))  # type: ignore[arg-type]

    def _executemany(self, sql: str, params: list[tuple[Any, ...]]) -> None:
        with self._db.cursor() as cursor:
            cursor.executemany(placeholders(sql), [storable(p) for p in params])  # type: ignore[arg-type]

    def _in_transaction(self, unit: Callable[[Database], T]) -> T:
        with self.transaction() as db:
            return unit(db)

    def _columns_sql(self) -> str:
        return (
            "SELECT column_name AS name FROM information_schema.columns"
            " WHERE table_name = ? AND table_schema = current_schema()"
        )

    def _present(self, schema: Schema) -> bool:
        names = [found.group(1) for statement in schema.statements(self.dialect) if (found := _CREATED.match(statement))]
        if len(names) != len(schema.statements(self.dialect)):
            return False  # a statement that creates something else: run the DDL
        for name in names:
            if self._cursor("SELECT to_regclass(?) AS found", (name,)).fetchone()["found"] is None:
                return False
        return all(
            column in {str(r["name"]) for r in self._cursor(self._columns_sql(), (table,)).fetchall()}
            for table, column, _ in schema.added_for(self.dialect)
        )

    def _serialise_ddl(self) -> None:
        # Concurrent CREATE ... IF NOT EXISTS of the same table can fail; workers starting together wait here.
        self._cursor("SELECT pg_advisory_xact_lock(hashtext('runner: create tables'))", ())

    def _statement(self, run: Callable[[], T], *, retry: bool, write: bool) -> T:
        with self._lock:
            if self._depth or getattr(self._guarded, "on", False):
                return run()
            if retry:
                return self._retrying(run, None)
            self._ready()
            try:
                return run()
            except Exception as exc:
                if self._lost(exc):
                    raise StoreUnavailable(
                        f"the connection to the store {self.where} dropped during a write that is not repeated "
                        f"automatically ({self._clean_error(exc)}); run the command again: it resumes where it stopped"
                    ) from None
                raise

    # --- a dropped connection ---------------------------------------------------------------

    def _retrying(self, run: Callable[[], T], check: Callable[[Database], T | None] | None) -> T:
        """``run()``; when the connection drops, reconnect (with backoff) and, unless ``check``
        finds that the lost try committed after all, run it again."""
        started: float | None = None
        delay = 0.0
        lost: Exception | None = None
        with self._lock:
            outer = getattr(self._guarded, "on", False)  # nested (a reconnect before a transaction): keep the outer's mode
            self._guarded.on = True
            try:
                while True:
                    try:
                        self._revive()
                        if lost is not None and check is not None:
                            found = check(self)
                            if found is not None:
                                return found
                        return run()
                    except Exception as exc:
                        if not self._lost(exc):
                            raise
                        lost = exc
                    started = time.monotonic() if started is None else started
                    delay = self._pause(started, delay, lost)
            finally:
                self._guarded.on = outer

    def _pause(self, started: float, delay: float, lost: Exception) -> float:
        """Wait before the next try (none before the first); :class:`StoreUnavailable` once the time is up."""
        policy = self.reconnect
        waited = time.monotonic() - started
        if waited >= policy.give_up_after:
            raise StoreUnavailable(self._gone(waited, lost)) from None
        if delay == 0.0:
            log.warning("the connection to the store %s dropped (%s); reconnecting", self.where, self._clean_error(lost))
            return policy.first_delay
        time.sleep(min(delay, max(policy.give_up_after - waited, 0.0)))
        return min(delay * 2, policy.max_delay)

    def _ready(self) -> None:
        """Reconnect first if the connection is known to be gone (nothing was sent on it yet)."""
        if self._db.closed or self._db.broken:
            self._retrying(lambda: None, None)

    def _revive(self) -> None:
        if self._closed:
            raise RuntimeError(f"the connection to the store {self.where} was closed; open the store again")
        if not (self._db.closed or self._db.broken):
            return
        with contextlib.suppress(Exception):
            self._db.close()
        self._db = self._connect()
        self.reconnects += 1
        try:
            for hook in self._hooks:
                hook(self)
        except BaseException:
            # A refused hook (a lock another process took meanwhile) leaves no usable session:
            # the next statement reconnects and asks the hooks again, so the refusal sticks.
            with contextlib.suppress(Exception):
                self._db.close()
            raise
        log.warning("reconnected to the store %s", self.where)

    def _lost(self, exc: BaseException) -> bool:
        """Whether ``exc`` means the connection (not the statement) failed, so a new one may succeed."""
        import psycopg
        from psycopg import errors

        if isinstance(exc, errors.TransactionRollback):  # a deadlock or serialisation failure: rolled back, try again
            return True
        if not isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError):
            return False
        state = getattr(exc, "sqlstate", None) or ""
        return self._db.closed or self._db.broken or state.startswith("08") or state in _LOST_STATES

    def _connect(self) -> Any:
        import psycopg
        from psycopg.rows import dict_row

        from runner.store.database import postgres_conninfo

        return psycopg.connect(
            postgres_conninfo(self.url), autocommit=True, row_factory=dict_row, application_name=self.application_name,
            connect_timeout=15, keepalives=1, keepalives_idle=30, keepalives_interval=10, keepalives_count=3,
        )  # fmt: skip  # keepalives: a dead worker's session (and its advisory locks) end within about a minute

    def _gone(self, waited: float, lost: Exception) -> str:
        return (
            f"lost the connection to the store {self.where} and could not get it back in {waited:.0f} s "
            f"({self._clean_error(lost)}). Check that the PostgreSQL server is running and reachable from this "
            f"machine (pg_isready -d '{self.where}'), then run the same command again: a batch resumes where it "
            f"stopped, nothing recorded is lost. To wait longer for the server, set ${RECONNECT_ENV}."
        )

    def _clean_error(self, exc: BaseException) -> str:
        return " ".join(redact(str(exc), [url_password(self.url), os.environ.get("PGPASSWORD")]).split())
