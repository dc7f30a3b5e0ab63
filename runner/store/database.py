"""The database under the run store and the shared cap ledger: an SQLite file (the embedded
default, one machine) or PostgreSQL (shared by every worker), behind one small interface.

Which one is one setting: a ``postgresql://user@host/db`` URL (``$RUNNER_STORE_URL``, or an
Airflow connection) selects PostgreSQL; anything else is an SQLite file path. The password
comes from the URL or ``$PGPASSWORD`` (libpq reads it) and is never part of a message:
:func:`redacted_url` is what errors and logs show.

SQL is written once, with ``?`` placeholders, in the subset both accept (``INSERT ... ON
CONFLICT``, ``RETURNING``, ``COALESCE``, ``CASE``); :class:`PostgresDatabase` turns ``?`` into
psycopg's ``%s``. Only table definitions differ (each store keeps one script per dialect).
Both connections are in autocommit mode: a lone statement is its own transaction, and
:meth:`Database.transaction` groups several.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

from runner.errors import StoreUnavailable, UsageError
from runner.redact import redact

STORE_URL_ENV = "RUNNER_STORE_URL"
PAGE_CACHE_KIB = 256
"""SQLite's own page cache per connection (its default is 2,000 KiB). The run store and the
batch journal write far more than they read back, and the operating system caches the file
anyway: a smaller cache is 1.75 MiB less resident memory per connection at the same speed."""
"""The environment variable naming the shared database (``postgresql://user@host/db``)."""
POSTGRES_SCHEMES = ("postgresql", "postgres", "postgresql+psycopg")
Dialect = Literal["sqlite", "postgresql"]


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

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._depth = 0

    # --- statements ---------------------------------------------------------------------

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        """Every row of a query, as dicts."""
        with self._lock:
            return [dict(row) for row in self._cursor(sql, params).fetchall()]

    def row(self, sql: str, params: Sequence[Any] = ()) -> dict[str, Any] | None:
        """The first row of a query (``None`` if it has none); ``RETURNING`` statements too."""
        with self._lock:
            found = self._cursor(sql, params).fetchone()
        return dict(found) if found is not None else None

    def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Run one statement; returns the number of rows it changed."""
        with self._lock:
            return int(self._cursor(sql, params).rowcount)

    @abstractmethod
    def executemany(self, sql: str, params: Iterable[Sequence[Any]]) -> None:
        """Run one statement for each parameter tuple."""

    @abstractmethod
    def transaction(self) -> contextlib.AbstractContextManager[Database]:
        """Statements inside the block commit together or not at all (nesting joins the outer one)."""

    @abstractmethod
    def script(self, ddl: str) -> None:
        """Run several ``;``-separated statements (table definitions)."""

    @abstractmethod
    def close(self) -> None:
        """Close the connection."""

    @abstractmethod
    def _cursor(self, sql: str, params: Sequence[Any]) -> Any:
        """Execute one statement; the DB-API cursor (the caller holds the lock)."""


class SqliteDatabase(Database):
    """An SQLite file in WAL mode: safe for many threads of one process and a few processes of one machine.

    Lone surrogates (from invalid UTF-8) are stored as visible escapes (``\\udcff``).
    """

    dialect: Dialect = "sqlite"

    def __init__(self, path: Path, *, busy_seconds: float = 30) -> None:
        super().__init__()
        self.path = path
        self.where = str(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=busy_seconds)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute(f"PRAGMA cache_size=-{PAGE_CACHE_KIB}")
        self._db.execute(f"PRAGMA busy_timeout={int(busy_seconds * 1000)}")

    def executemany(self, sql: str, params: Iterable[Sequence[Any]]) -> None:
        with self._lock:
            self._db.executemany(sql, (_storable(p, nul=False) for p in params))

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Database]:
        with self._lock:
            if self._depth:
                yield self
                return
            self._db.execute("BEGIN IMMEDIATE")  # takes the write lock now: no upgrade deadlock later
            self._depth = 1
            try:
                yield self
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            finally:
                self._depth = 0
            self._db.execute("COMMIT")

    def script(self, ddl: str) -> None:
        with self._lock:
            self._db.executescript(ddl)

    def columns(self, table: str) -> set[str]:
        with self._lock:
            return {row["name"] for row in self._db.execute(f"PRAGMA table_info({table})")}

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _cursor(self, sql: str, params: Sequence[Any]) -> Any:
        return self._db.execute(sql, _storable(params, nul=False))


class PostgresDatabase(Database):
    """A PostgreSQL connection (psycopg 3, autocommit), shared by every worker that names the same URL.

    Text PostgreSQL cannot hold (NUL characters, lone surrogates from invalid UTF-8) is
    stored as visible escapes (``\\x00``, ``\\udcff``), so a hostile value is kept, not fatal.
    """

    dialect: Dialect = "postgresql"

    def __init__(self, url: str, *, application_name: str = "runner") -> None:
        super().__init__()
        self.url = url
        self.where = redacted_url(url)
        try:
            import psycopg
            from psycopg.rows import dict_row
        except ImportError:  # pragma: no cover - psycopg is in the postgres extra
            raise UsageError(
                f"the store {self.where} is PostgreSQL, but psycopg is not installed: pip install 'runner[postgres]'"
            ) from None
        try:
            self._db = psycopg.connect(
                postgres_conninfo(url), autocommit=True, row_factory=dict_row, application_name=application_name,
                connect_timeout=15, keepalives=1, keepalives_idle=30, keepalives_interval=10, keepalives_count=3,
            )  # fmt: skip  # keepalives: a dead worker's session (and its advisory locks) end within about a minute
        except psycopg.ProgrammingError as exc:  # a malformed URL or option
            raise UsageError(f"cannot use the store {self.where}: {self._clean_error(exc)}") from None
        except psycopg.Error as exc:
            raise StoreUnavailable(f"cannot connect to the store {self.where}: {self._clean_error(exc)}") from None

    def executemany(self, sql: str, params: Iterable[Sequence[Any]]) -> None:
        with self._lock, self._db.cursor() as cursor:
            cursor.executemany(_placeholders(sql), [_storable(p) for p in params])

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Database]:
        with self._lock, self._db.transaction():
            yield self

    def script(self, ddl: str) -> None:
        """Create tables once, even when several workers start at the same moment (an
        advisory lock serialises concurrent ``CREATE ... IF NOT EXISTS``, which can otherwise fail)."""
        with self.transaction():
            self._db.execute("SELECT pg_advisory_xact_lock(hashtext('runner: create tables'))")
            for statement in ddl.split(";"):
                if statement.strip():
                    self._db.execute(statement)  # type: ignore[arg-type]  # our own DDL, no parameters

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _cursor(self, sql: str, params: Sequence[Any]) -> Any:
        return self._db.execute(_placeholders(sql), _storable(params))  # type: ignore[arg-type]

    def _clean_error(self, exc: Exception) -> str:
        return " ".join(redact(str(exc), [url_password(self.url), os.environ.get("PGPASSWORD")]).split())


def open_database(target: str | Path) -> Database:
    """An SQLite file for a path, PostgreSQL for a ``postgresql://`` URL."""
    if is_postgres_url(target):
        return PostgresDatabase(str(target))
    try:
        return SqliteDatabase(Path(target))
    except (OSError, sqlite3.Error) as exc:
        raise UsageError(f"cannot open the store {target}: {exc}") from None


def _placeholders(sql: str) -> str:
    """``?`` -> ``%s`` (a literal ``%`` doubled): our SQL never has ``?`` inside a string literal."""
    return sql.replace("%", "%%").replace("?", "%s")


def _storable(params: Sequence[Any], *, nul: bool = True) -> tuple[Any, ...]:
    """Parameters as the database takes them: lone surrogates (from invalid UTF-8) as
    ``\\udcff`` escapes; with ``nul`` (PostgreSQL's text cannot hold it) NUL as ``\\x00``."""
    return tuple(_text(p, nul) if isinstance(p, str) else p for p in params)


def _text(value: str, nul: bool) -> str:
    if nul and "\x00" in value:
        value = value.replace("\x00", "\\x00")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        value = value.encode("utf-8", "backslashreplace").decode("utf-8")
    return value
