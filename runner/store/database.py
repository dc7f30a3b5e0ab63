"""The database under the run store and the shared cap ledger: an SQLite file (the embedded
default, one machine) or PostgreSQL (shared by every worker), behind one small interface.

Which one is one setting: a ``postgresql://user@host/db`` URL (``$RUNNER_STORE_URL``, or an
Airflow connection) selects PostgreSQL; anything else is an SQLite file path. The password
comes from the URL or ``$PGPASSWORD`` (libpq reads it) and is never part of a message:
:func:`redacted_url` is what errors and logs show.

SQL is written once, with ``?`` placeholders, in the subset both accept (``INSERT ... ON
CONFLICT``, ``RETURNING``, ``COALESCE``, ``CASE``); :class:`~runner.store.postgres.PostgresDatabase`
turns ``?`` into psycopg's ``%s``. Table definitions are written once too, with a type map per
dialect (:mod:`runner.store.schema`). Both connections are in autocommit mode: a lone
statement is its own transaction, and :meth:`Database.atomic` groups several.

A PostgreSQL connection can drop (a server restart, ``pg_terminate_backend``, a network
blip). Reads are then repeated on a new connection, with backoff, for a bounded time; a
write is repeated only when it is safe to apply twice (``idempotent=True``) or when the
caller gives :meth:`Database.atomic` a ``check`` that tells whether the first try committed
(a ``COMMIT`` whose answer was lost may have). When the server stays away,
:class:`~runner.errors.StoreUnavailable` names the store (password redacted) and what to do.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import urllib.parse
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

from runner.core.sqlite_faults import file_faults, wal_mode
from runner.errors import UsageError
from runner.store.schema import Dialect as Dialect  # re-exported: what a Database is
from runner.store.schema import Schema

if TYPE_CHECKING:
    from runner.store.group_commit import CommitGroup

STORE_URL_ENV = "RUNNER_STORE_URL"
"""The environment variable naming the shared database (``postgresql://user@host/db``)."""
PAGE_CACHE_KIB = 256
"""SQLite's own page cache per connection (its default is 2,000 KiB). The run store and the
batch journal write far more than they read back, and the operating system caches the file
anyway: a smaller cache is 1.75 MiB less resident memory per connection at the same speed."""
POSTGRES_SCHEMES = ("postgresql", "postgres", "postgresql+psycopg")
DEFAULT_BUSY_SECONDS = 30.0
"""How long an SQLite store waits for another process's lock before it gives up (the run store:
``$RUNNER_STORE_BUSY_SECONDS``, :func:`runner.store.connect.store_busy_seconds`)."""
T = TypeVar("T")


def is_postgres_url(target: str | os.PathLike[str] | None) -> bool:
    """Whether ``target`` is a PostgreSQL URL (``postgresql://``, ``postgres://`` or SQLAlchemy's ``postgresql+psycopg://``)."""
    if target is None or isinstance(target, os.PathLike):
        return False
    scheme, sep, _ = str(target).partition("://")
    return bool(sep) and scheme.lower() in POSTGRES_SCHEMES


def store_url_from_env() -> str | None:
    """``$RUNNER_STORE_URL`` when it is set (an empty value counts as unset)."""
    return os.environ.get(STORE_URL_ENV) or None


def resolve_store(*, url: str | None = None, path: Path | None = None, default: Path) -> str | Path:
    """Where a store lives: an explicit ``url``, else an explicit SQLite ``path``, else
    ``$RUNNER_STORE_URL``, else the SQLite file ``default``.

    A value of ``url`` or ``$RUNNER_STORE_URL`` that is not a PostgreSQL URL is refused: a
    typo must not silently fall back to a local file no other worker can see.
    """
    chosen = url or (None if path is not None else store_url_from_env())
    if chosen is None:
        return path if path is not None else default
    if not is_postgres_url(chosen):
        source = "store URL" if url else f"${STORE_URL_ENV}"
        raise UsageError(
            f"{source} {redacted_url(chosen)!r} is not a PostgreSQL URL; use postgresql://USER@HOST[:PORT]/DATABASE "
            "(or leave it unset for the SQLite file under .runner/)"
        )
    return chosen


def postgres_conninfo(url: str) -> str:
    """``url`` as libpq takes it: SQLAlchemy's ``postgresql+psycopg://`` and ``postgres://`` become ``postgresql://``."""
    scheme, _, rest = url.partition("://")
    return f"postgresql://{rest}" if scheme.lower() in POSTGRES_SCHEMES else url


def redacted_url(url: str) -> str:
    """``url`` with its password (and any ``password=`` parameter) replaced by ``***``."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparsable URL>"
    netloc = parts.netloc
    if "@" in netloc:
        user, _, host = netloc.rpartition("@")
        if ":" in user:
            user = user.split(":", 1)[0] + ":***"
        netloc = f"{user}@{host}"
    query = "&".join(
        "password=***" if pair.lower().startswith("password=") else pair for pair in parts.query.split("&")
    ) if parts.query else ""  # fmt: skip
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def url_password(url: str) -> str | None:
    try:
        return urlsplit(url).password
    except ValueError:
        return None


class Database(ABC):
    """One connection, guarded by a lock (many runs of one process share it)."""

    dialect: Dialect
    where: str  # what messages call this database (a path, or the URL without its password)
    lock_rows = ""
    """What a ``SELECT`` ends with to lock the rows it reads until the transaction ends (PostgreSQL's
    ``FOR UPDATE``; an SQLite transaction holds the whole file already)."""
    groupable = False
    """Whether writes join a batch's :mod:`~runner.store.group_commit` (its transaction stays open
    across writes until the group commits)."""
    commit_rank = 0
    """Where this database commits in a group: lower first (a batch journal, 1, after the stores its rows wrote to)."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._depth = 0  # > 0 inside a transaction: statements there are retried with their unit, not alone
        self._group: CommitGroup | None = None  # the commit group whose transaction is open on this connection

    # --- statements ---------------------------------------------------------------------

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        """Every row of a query, as dicts (a read: repeated if the connection drops)."""
        return self._statement(lambda: [dict(row) for row in self._cursor(sql, params).fetchall()], retry=True, write=False)

    def row(self, sql: str, params: Sequence[Any] = (), *, idempotent: bool = False) -> dict[str, Any] | None:
        """The first row of a query (``None`` if it has none); ``RETURNING`` statements too.
        A ``SELECT`` is repeated on a dropped connection; a write only when ``idempotent``."""

        def run() -> dict[str, Any] | None:
            found = self._cursor(sql, params).fetchone()
            return dict(found) if found is not None else None

        read = is_read(sql)
        return self._statement(run, retry=idempotent or read, write=not read)

    def execute(self, sql: str, params: Sequence[Any] = (), *, idempotent: bool = False) -> int:
        """Run one statement; returns the number of rows it changed. Repeated on a dropped
        connection only when ``idempotent`` (applying it twice leaves what applying it once does)."""
        read = is_read(sql)
        return self._statement(lambda: int(self._cursor(sql, params).rowcount), retry=idempotent or read, write=not read)

    def executemany(self, sql: str, params: Iterable[Sequence[Any]], *, idempotent: bool = False) -> None:
        """Run one statement for each parameter tuple."""
        batch = [tuple(p) for p in params]  # kept, so a retry sends the same rows
        self._statement(lambda: self._executemany(sql, batch), retry=idempotent, write=True)

    def atomic(self, unit: Callable[[Database], T], *, check: Callable[[Database], T | None] | None = None) -> T:
        """``unit(db)`` in one transaction, its result returned. If the connection drops, the
        unit runs again on a new one: first ``check(db)`` is asked whether the lost try
        committed after all (its answer, not ``None``, is returned then). Without ``check``
        the unit must be safe to apply twice. Nested in another transaction it joins it."""
        with self._lock:
            if self._depth:
                return unit(self)
            if (group := self._joined()) is not None:
                result = self._in_savepoint(unit)
                group.wrote()
                return result
            return self._retrying(lambda: self._in_transaction(unit), check)

    def checked(self, write: Callable[[Database], T], *, check: Callable[[Database], T | None]) -> T:
        """:meth:`atomic` for a ``write`` of one statement: sent on its own (a lone statement is its
        own transaction: one round trip, not three), repeated after a dropped connection unless
        ``check`` finds that the lost try committed."""
        with self._lock:
            if self._depth:
                return write(self)
            if (group := self._joined()) is not None:
                result = write(self)
                group.wrote()
                return result
            return self._retrying(lambda: write(self), check)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Database]:
        """Statements inside the block commit together or not at all (nesting joins the outer
        one). Not repeated on a dropped connection: :meth:`atomic` is."""
        with self._lock:
            if self._depth:
                yield self
                return
            if (group := self._joined()) is not None:
                with self._savepoint():
                    yield self
                group.wrote()
                return
            self._ready()
            self._depth = 1
            try:
                with self._outermost():
                    yield self
            finally:
                self._depth = 0

    def _ready(self) -> None:
        """Make the connection usable before a transaction begins (a dropped one is reconnected)."""
        return None

    # --- group commit (runner.store.group_commit) ----------------------------------------

    def _joined(self) -> CommitGroup | None:
        """The commit group a write made now joins (its transaction opened here if need be), or ``None``."""
        if self._group is not None:
            return self._group
        if not self.groupable:
            return None
        from runner.store.group_commit import current_group

        group = current_group()
        if group is not None:
            group.begin(self)
        return group

    def _begin_group(self, group: CommitGroup) -> None:
        """Open the transaction the group's writes run in (the caller holds the lock)."""
        with self._lock:
            self._begin()
            self._group = group

    def _end_group(self, *, commit: bool) -> None:
        """Commit (or roll back) the group's transaction."""
        with self._lock:
            try:
                if commit:
                    self._commit()
                else:
                    self._rollback()
            finally:
                self._group = None

    def _in_savepoint(self, unit: Callable[[Database], T]) -> T:
        """``unit(self)`` inside the group's transaction, undone alone if it raises."""
        with self._savepoint():
            return unit(self)

    @contextlib.contextmanager
    def _savepoint(self) -> Iterator[None]:
        self._depth = 1
        try:
            self._cursor("SAVEPOINT unit", ())
            try:
                yield
            except BaseException:
                self._cursor("ROLLBACK TO unit", ())
                self._cursor("RELEASE unit", ())
                raise
            self._cursor("RELEASE unit", ())
        finally:
            self._depth = 0

    def _begin(self) -> None:
        raise NotImplementedError(f"{type(self).__name__} does not join commit groups")

    def _commit(self) -> None:
        raise NotImplementedError(f"{type(self).__name__} does not join commit groups")

    def _rollback(self) -> None:
        raise NotImplementedError(f"{type(self).__name__} does not join commit groups")

    @abstractmethod
    def _outermost(self) -> contextlib.AbstractContextManager[None]:
        """Begin the backend's transaction; commit it at the end of the block, roll it back on an error."""

    def create(self, schema: Schema) -> None:
        """Create ``schema``'s tables and add its added columns where missing (a store made by
        an earlier version keeps its rows), in one transaction, one process at a time."""
        self.atomic(lambda db: db._apply(schema))

    def script(self, ddl: str) -> None:
        """Run several ``;``-separated statements (table definitions, types as in :mod:`runner.store.schema`)."""
        self.create(Schema(ddl))

    def columns(self, table: str) -> set[str]:
        """The column names of ``table`` (empty if there is no such table)."""
        return {str(r["name"]) for r in self.rows(self._columns_sql(), (table,))}

    @abstractmethod
    def close(self) -> None:
        """Close the connection."""

    def on_reconnect(self, hook: Callable[[Database], object]) -> None:
        """Run ``hook`` on each new connection after a dropped one (an SQLite file never drops: no hook runs)."""
        del hook

    # --- what a backend provides ---------------------------------------------------------

    @abstractmethod
    def _cursor(self, sql: str, params: Sequence[Any]) -> Any:
        """Execute one statement; the DB-API cursor (the caller holds the lock)."""

    @abstractmethod
    def _executemany(self, sql: str, params: list[tuple[Any, ...]]) -> None:
        """Execute one statement per parameter tuple (the caller holds the lock)."""

    @abstractmethod
    def _in_transaction(self, unit: Callable[[Database], T]) -> T:
        """``unit(self)`` inside :meth:`transaction`."""

    @abstractmethod
    def _columns_sql(self) -> str:
        """A query with one parameter (a table) whose rows' ``name`` are its columns."""

    def _serialise_ddl(self) -> None:
        """Make concurrent schema changes of other processes wait (inside the transaction); an
        SQLite transaction (``BEGIN IMMEDIATE``) already holds the file's write lock."""
        return None

    def _retrying(self, run: Callable[[], T], check: Callable[[Database], T | None] | None) -> T:
        """Run ``run`` (and on a dropped connection, reconnect and run it again; see :meth:`atomic`)."""
        return run()

    def _statement(self, run: Callable[[], T], *, retry: bool, write: bool) -> T:
        with self._lock:
            if self._depth or (self._group is not None and not write):
                return run()
            if write and (group := self._joined()) is not None:
                result = run()
                group.wrote()
                return result
            if not retry:
                return run()
            return self._retrying(run, None)

    def _present(self, schema: Schema) -> bool:
        """Whether every table, index and added column of ``schema`` exists already (then no DDL
        runs). SQLite answers no: its DDL is cheap and the file's write lock serialises it."""
        del schema
        return False

    def _apply(self, schema: Schema) -> None:
        # Checked before and after waiting: DDL on tables in use takes locks (PostgreSQL's CREATE INDEX
        # IF NOT EXISTS locks the table even when the index exists), which can deadlock other workers'
        # transactions; a store that is already complete takes none.
        if self._present(schema):
            return
        self._serialise_ddl()
        if self._present(schema):
            return
        for statement in schema.statements(self.dialect):
            self._cursor(statement, ())
        for table, column, definition in schema.added_for(self.dialect):
            if column not in {str(r["name"]) for r in self._cursor(self._columns_sql(), (table,)).fetchall()}:
                self._cursor(f"ALTER TABLE {table} ADD COLUMN {column} {definition}", ())


class SqliteDatabase(Database):
    """An SQLite file in WAL mode: safe for many threads of one process and a few processes of one machine.

    Lone surrogates (from invalid UTF-8) are stored as visible escapes (``\\udcff``).
    ``synchronous`` is ``NORMAL`` (a committed transaction survives the process, not a power
    loss) or ``FULL`` (an fsync per commit).
    """

    dialect: Dialect = "sqlite"
    groupable = True

    def __init__(
        self, path: Path, *, busy_seconds: float = DEFAULT_BUSY_SECONDS, synchronous: str = "NORMAL", read_only: bool = False, role: str = "run store"
    ) -> None:
        super().__init__()
        self.path = path
        self.where = str(path)
        # a damaged, locked or read-only file: one line naming it and the fix (runner.store.sqlite_faults)
        self._faults = lambda: file_faults(path, role, busy_seconds)
        if not read_only:
            path.parent.mkdir(parents=True, exist_ok=True)
        with self._faults():
            if read_only:  # an existing file, opened so that nothing (not even its journal mode) changes
                uri = f"file:{urllib.parse.quote(str(path.resolve()))}?mode=ro"
                self._db = sqlite3.connect(uri, uri=True, check_same_thread=False, isolation_level=None, timeout=busy_seconds)
                self._db.execute("SELECT count(*) FROM sqlite_master")  # not a database: refused now, not at the first read
            else:
                self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=busy_seconds)
                wal_mode(self._db, busy_seconds)
            self._db.row_factory = sqlite3.Row
            self._db.execute(f"PRAGMA synchronous={'FULL' if synchronous == 'FULL' else 'NORMAL'}")
            self._db.execute(f"PRAGMA cache_size=-{PAGE_CACHE_KIB}")
            self._db.execute(f"PRAGMA busy_timeout={int(busy_seconds * 1000)}")

    @contextlib.contextmanager
    def _outermost(self) -> Iterator[None]:
        with self._faults():
            self._db.execute("BEGIN IMMEDIATE")  # takes the write lock now: no upgrade deadlock later
        try:
            yield
        except BaseException:
            with contextlib.suppress(sqlite3.Error):  # a damaged file may refuse the rollback too: the first error says why
                self._db.execute("ROLLBACK")
            raise
        with self._faults():
            self._db.execute("COMMIT")

    def _begin(self) -> None:
        with self._faults():
            self._db.execute("BEGIN IMMEDIATE")

    def _commit(self) -> None:
        with self._faults():
            self._db.execute("COMMIT")

    def _rollback(self) -> None:
        if self._db.in_transaction:
            self._db.execute("ROLLBACK")

    def _statement(self, run: Callable[[], T], *, retry: bool, write: bool) -> T:
        with self._faults():  # rows are read (and a damaged page found) after _cursor returns
            return super()._statement(run, retry=retry, write=write)

    def close(self) -> None:
        with self._lock:
            if self._group is not None:
                self._group.commit()  # what the batch wrote here last is kept
            self._db.close()

    def _cursor(self, sql: str, params: Sequence[Any]) -> Any:
        with self._faults():
            return self._db.execute(sql, storable(params, nul=False))

    def _executemany(self, sql: str, params: list[tuple[Any, ...]]) -> None:
        with self._faults():
            self._db.executemany(sql, (storable(p, nul=False) for p in params))

    def _in_transaction(self, unit: Callable[[Database], T]) -> T:
        with self.transaction() as db:
            return unit(db)

    def _columns_sql(self) -> str:
        return "SELECT name FROM pragma_table_info(?)"


def is_read(sql: str) -> bool:
    """Whether ``sql`` (our own, never user text) is a plain query, safe to send again."""
    return sql.lstrip()[:6].upper() == "SELECT"


def placeholders(sql: str) -> str:
    """``?`` -> ``%s`` (a literal ``%`` doubled): our SQL never has ``?`` inside a string literal."""
    return sql.replace("%", "%%").replace("?", "%s")


def storable(params: Sequence[Any], *, nul: bool = True) -> tuple[Any, ...]:
    """Parameters as the database takes them: lone surrogates (from invalid UTF-8) as
    ``\\udcff`` escapes; with ``nul`` (PostgreSQL's text cannot hold it) NUL as ``\\x00``."""
    return tuple(_text(p, nul) if isinstance(p, str) else p for p in params)


def _text(value: str, nul: bool) -> str:
    if nul and "\x00" in value:
        value = value.replace("\x00", "\\x00")
    if value.isascii():  # the common case, checked without encoding a copy
        return value
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        value = value.encode("utf-8", "backslashreplace").decode("utf-8")
    return value
