"""Connections to a source, read-only by construction, and one query at a time on them.

- PostgreSQL (psycopg 3): the session defaults to read-only transactions, every query runs
  in a ``READ ONLY`` transaction that is rolled back, as a prepared statement (so one
  statement: ``SELECT 1; COMMIT; DELETE ...`` is refused by the server), under a server-side
  ``statement_timeout``.
- SQLite: opened ``mode=ro``, and an authorizer allows only reads during the query (no
  ``ATTACH``, no ``PRAGMA``, no temporary tables); the allow list is enforced by it too.
- DuckDB: opened ``read_only=True`` with file access and extension loading disabled and
  the configuration locked. Workspace files (``files:``) are loaded into a private database
  file first, which is then opened the same way.
- Any other SQLAlchemy dialect: one statement checked by the parser, rolled back afterwards;
  give it an account that can only read.

A watchdog interrupts a query that outlives the timeout on every backend.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner.tools.sql.errors import SqlConnectionError, SqlError, SqlRefused, SqlSyntaxError, SqlTimeout
from runner.tools.sql.guard import DIALECTS, AllowList, TableName, allow_list, check_read_query
from runner.tools.sql.source import SqlSource

MAX_SCHEMA_TABLES = 200


@dataclass(frozen=True)
class QueryResult:
    """Rows of one query: at most ``max_rows``; ``truncated`` when the query had more."""

    columns: list[str]
    rows: list[tuple[Any, ...]]
    truncated: bool


@dataclass(frozen=True)
class TableInfo:
    """A table or view of the source and its columns (name, type)."""

    schema: str | None
    name: str
    columns: list[tuple[str, str]] = field(default_factory=list)

    @property
    def qualified(self) -> str:
        return f"{self.schema}.{self.name}" if self.schema else self.name


class SqlBackend:
    """One open source. Use as a context manager; not shared between threads."""

    backend: str = ""
    default_schema: str = "main"

    def __init__(self, source: SqlSource):
        self.source = source
        self.allow: tuple[AllowList, ...] = ()  # every list must permit a table (the source's, the agent's)

    def __enter__(self) -> SqlBackend:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    @property
    def dialect(self) -> str | None:
        """The sqlglot dialect of this backend."""
        return DIALECTS.get(self.backend)

    def query(self, sql: str, params: Mapping[str, Any], max_rows: int, timeout: float) -> QueryResult:
        """Run one read query with bound ``params`` (``:name`` in ``sql``)."""
        check_read_query(sql, self.dialect, self.allow)
        statement, bound = self._bind(sql, params)
        with _watchdog(timeout, self._interrupt) as fired:
            try:
                return self._run(statement, bound, max_rows, timeout)
            except SqlError:
                raise
            except Exception as error:  # a driver's own exception types; classified by type below
                raise self._classify(error, fired.is_set()) from None

    def tables(self) -> list[TableInfo]:
        """The tables and views a query may read (the allow list applied), with their columns."""
        found = [t for t in self._tables() if self.permits(TableName(t.schema, t.name))]
        return found[:MAX_SCHEMA_TABLES]

    def permits(self, table: TableName) -> bool:
        """Whether every allow list permits ``table``."""
        return all(allow.permits(table) for allow in self.allow)

    def restrict(self, entries: Sequence[str]) -> None:
        """Narrow what may be read to ``entries`` as well (an agent's own allow list)."""
        extra = allow_list(entries, self.default_schema, self.dialect)
        if extra is not None:
            self.allow = (*self.allow, extra)

    def close(self) -> None:
        """Release the connection."""

    # -- per backend ---------------------------------------------------------------

    def _bind(self, sql: str, params: Mapping[str, Any]) -> tuple[str, Any]:
        raise NotImplementedError

    def _run(self, sql: str, params: Any, max_rows: int, timeout: float) -> QueryResult:
        raise NotImplementedError

    def _interrupt(self) -> None:
        raise NotImplementedError

    def _tables(self) -> list[TableInfo]:
        raise NotImplementedError

    def _classify(self, error: Exception, timed_out: bool) -> SqlError:
        if timed_out:
            return SqlTimeout(f"cancelled after {self.source.timeout_seconds:g} s (the source's timeout_seconds)")
        return SqlError(_first_line(error))


def open_backend(source: SqlSource, url: str, workspace: Path) -> SqlBackend:
    """Connect to ``source`` at ``url`` (secrets resolved). :class:`SqlConnectionError` when
    it cannot be reached or opened; the message never holds the password."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        raise SqlConnectionError(f"source '{source.name}': not a SQLAlchemy URL") from None
    backend = parsed.get_backend_name()
    opener: Callable[[SqlSource, Any, Path], SqlBackend]
    opener = {"duckdb": DuckBackend, "sqlite": SqliteBackend}.get(backend, SqlAlchemyBackend)  # type: ignore[assignment]
    try:
        database = opener(source, parsed, workspace)
    except (SqlError, ModuleNotFoundError):
        raise
    except Exception as error:  # drivers raise their own types for an unreachable or missing database
        raise SqlConnectionError(f"source '{source.name}' ({parsed.render_as_string(hide_password=True)}): {_first_line(error)}") from None
    database.restrict(source.allow)
    return database


# -- SQLAlchemy dialects (PostgreSQL and the rest) -------------------------------------


class SqlAlchemyBackend(SqlBackend):
    """A database reached through SQLAlchemy's dialect and DBAPI driver."""

    def __init__(self, source: SqlSource, url: Any, workspace: Path):
        super().__init__(source)
        from sqlalchemy import create_engine
        from sqlalchemy.pool import NullPool

        self.backend = url.get_backend_name()
        connect_args: dict[str, Any] = {}
        if self.backend == "postgresql":
            # every transaction of this session starts read-only, even one our code did not begin
            connect_args = {"options": "-c default_transaction_read_only=on", "connect_timeout": 15}
            self.default_schema = "public"
        self.engine = create_engine(url, poolclass=NullPool, connect_args=connect_args)
        self.raw = self.engine.raw_connection()
        self.connection: Any = self.raw.driver_connection
        if self.backend != "postgresql":
            self.default_schema = self.engine.dialect.default_schema_name or self.default_schema

    def close(self) -> None:
        with contextlib.suppress(Exception):  # closing a broken connection must not hide the query's error
            self.raw.close()
        self.engine.dispose()

    def _bind(self, sql: str, params: Mapping[str, Any]) -> tuple[str, Any]:
        return bind(sql, params, self.engine.dialect)

    def _run(self, sql: str, params: Any, max_rows: int, timeout: float) -> QueryResult:
        cursor = self.connection.cursor()
        try:
            if self.backend == "postgresql":
                cursor.execute("SET TRANSACTION READ ONLY")
                cursor.execute("SELECT set_config('statement_timeout', %s, true)", (str(max(1, int(timeout * 1000))),))
                cursor.execute(sql, params, prepare=True)  # a prepared statement is one statement
            else:
                cursor.execute(sql, params)
            return _fetch(cursor, max_rows)
        finally:
            with contextlib.suppress(Exception):
                cursor.close()
            with contextlib.suppress(Exception):
                self.connection.rollback()

    def _interrupt(self) -> None:
        cancel = getattr(self.connection, "cancel_safe", None) or getattr(self.connection, "cancel", None)
        if cancel is not None:
            cancel()

    def _classify(self, error: Exception, timed_out: bool) -> SqlError:
        state = getattr(error, "sqlstate", None) or ""
        if timed_out or state == "57014":  # query_canceled: statement_timeout or our cancel
            return super()._classify(error, True)
        if state in ("25006", "42501"):  # read_only_sql_transaction, insufficient_privilege
            return SqlRefused(f"{_first_line(error)} (the source is read-only)")
        if state == "42601":  # syntax_error
            return SqlSyntaxError(_first_line(error))
        return SqlError(_first_line(error))

    def _tables(self) -> list[TableInfo]:
        from sqlalchemy import inspect

        inspector = inspect(self.engine)
        named = {_schema_of(e, self.default_schema) for allow in self.allow for e in allow.entries}
        schemas = sorted(named) if named else [self.default_schema]
        found: list[TableInfo] = []
        for schema in schemas:
            names = inspector.get_table_names(schema=schema) + inspector.get_view_names(schema=schema)
            for name in sorted(names)[:MAX_SCHEMA_TABLES]:
                columns = [(c["name"], str(c["type"])) for c in inspector.get_columns(name, schema=schema)]
                found.append(TableInfo(schema, name, columns))
        return found


# -- SQLite ------------------------------------------------------------------------------


class SqliteBackend(SqlBackend):
    """A SQLite file opened ``mode=ro``, with an authorizer that allows reads only."""

    backend = "sqlite"
    default_schema = "main"

    def __init__(self, source: SqlSource, url: Any, workspace: Path):
        super().__init__(source)
        import sqlite3

        database = url.database or ""
        if database in ("", ":memory:"):
            raise SqlConnectionError(f"source '{source.name}': a SQLite source needs a database file")
        path = _project_path(source, database)
        if not path.is_file():
            raise SqlConnectionError(f"source '{source.name}': no SQLite database at {path}")
        self.connection = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True, check_same_thread=False)
        self.connection.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)

    def close(self) -> None:
        self.connection.close()

    def _bind(self, sql: str, params: Mapping[str, Any]) -> tuple[str, Any]:
        from sqlalchemy.dialects import sqlite

        return bind(sql, params, sqlite.dialect())

    def _run(self, sql: str, params: Any, max_rows: int, timeout: float) -> QueryResult:
        self.connection.set_authorizer(self._authorize)
        try:
            cursor = self.connection.execute(sql, params)
            return _fetch(cursor, max_rows)
        finally:
            self.connection.set_authorizer(None)
            self.connection.rollback()

    def _authorize(self, action: int, arg1: str | None, arg2: str | None, db: str | None, inner: str | None) -> int:
        import sqlite3

        if action in (sqlite3.SQLITE_SELECT, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE):
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_READ:
            if not self.allow or not arg1:
                return sqlite3.SQLITE_OK
            permitted = self.permits(TableName(db, arg1)) or bool(inner and self.permits(TableName(db, inner)))
            return sqlite3.SQLITE_OK if permitted else sqlite3.SQLITE_DENY
        return sqlite3.SQLITE_DENY

    def _interrupt(self) -> None:
        self.connection.interrupt()

    def _classify(self, error: Exception, timed_out: bool) -> SqlError:
        import sqlite3

        code = getattr(error, "sqlite_errorcode", None)
        if timed_out or code == sqlite3.SQLITE_INTERRUPT:
            return super()._classify(error, True)
        if code in (sqlite3.SQLITE_AUTH, sqlite3.SQLITE_READONLY):
            return SqlRefused(f"{_first_line(error)} (the source is read-only; only its allowed tables may be read)")
        if isinstance(error, sqlite3.ProgrammingError):  # e.g. several statements, a missing parameter
            return SqlRefused(_first_line(error))
        return SqlError(_first_line(error))

    def _tables(self) -> list[TableInfo]:
        rows = self.connection.execute(
            "SELECT name FROM sqlite_schema WHERE type IN ('table', 'view') AND name NOT LIKE 'sqlite_%' ORDER BY name"
        ).fetchall()
        found = []
        for (name,) in rows:
            columns = self.connection.execute("SELECT name, type FROM pragma_table_info(?)", (name,)).fetchall()
            found.append(TableInfo("main", name, [(c, t or "") for c, t in columns]))
        return found


# -- DuckDB ----------------------------------------------------------------------------

_DUCKDB_LOCKDOWN = {
    "enable_external_access": False,
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
    "lock_configuration": True,
}
_READERS = {"csv": "read_csv", "tsv": "read_csv", "json": "read_json_auto", "jsonl": "read_json_auto", "ndjson": "read_json_auto",
            "parquet": "read_parquet", "pq": "read_parquet"}  # fmt: skip


class DuckBackend(SqlBackend):
    """A DuckDB file, or workspace files loaded into a private one; opened ``read_only`` with
    file access off and the configuration locked."""

    backend = "duckdb"
    default_schema = "main"

    def __init__(self, source: SqlSource, url: Any, workspace: Path):
        super().__init__(source)
        import duckdb

        self._scratch: Path | None = None
        database = url.database or ":memory:"
        if source.files:
            if database != ":memory:":
                raise SqlConnectionError(f"source '{source.name}': files: needs url duckdb:///:memory:")
            path = self._load_files(source, workspace)
        elif database == ":memory:":
            raise SqlConnectionError(f"source '{source.name}': an in-memory DuckDB source needs files: to query")
        else:
            path = _project_path(source, database)
            if not path.is_file():
                raise SqlConnectionError(f"source '{source.name}': no DuckDB database at {path}")
        self.connection = duckdb.connect(str(path), read_only=True, config=dict(_DUCKDB_LOCKDOWN))

    def _load_files(self, source: SqlSource, workspace: Path) -> Path:
        import duckdb

        from runner.tools.paths import read_workspace_file

        self._scratch = Path(tempfile.mkdtemp(prefix="runner-duckdb-"))
        target = self._scratch / "files.duckdb"
        with duckdb.connect(str(target)) as builder:
            for index, (table, rel) in enumerate(sorted(source.files.items())):
                suffix = rel.rsplit(".", 1)[-1].lower() if "." in rel else ""
                if suffix not in _READERS:
                    raise SqlConnectionError(f"source '{source.name}': cannot tell the format of '{rel}' (csv, tsv, json, jsonl, parquet)")
                copy = self._scratch / f"file{index}.{suffix}"  # read through the workspace's confinement, then by DuckDB
                copy.write_bytes(read_workspace_file(workspace, rel, 512 * 1024 * 1024))
                options = ", delim='\\t'" if suffix == "tsv" else ""
                builder.execute(f'CREATE TABLE "{table}" AS SELECT * FROM {_READERS[suffix]}(\'{copy}\'{options})')
                copy.unlink()
        return target

    def close(self) -> None:
        self.connection.close()
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)

    def _bind(self, sql: str, params: Mapping[str, Any]) -> tuple[str, Any]:
        from sqlalchemy.engine.default import DefaultDialect

        return bind(sql, params, DefaultDialect(paramstyle="qmark"))

    def _run(self, sql: str, params: Any, max_rows: int, timeout: float) -> QueryResult:
        # on the connection itself (a cursor is a connection of its own, which interrupt() would miss)
        self.connection.execute(sql, params)
        return _fetch(self.connection, max_rows)

    def _interrupt(self) -> None:
        self.connection.interrupt()

    def _classify(self, error: Exception, timed_out: bool) -> SqlError:
        import duckdb

        if timed_out or isinstance(error, duckdb.InterruptException):
            return super()._classify(error, True)
        if isinstance(error, duckdb.PermissionException):
            return SqlRefused(f"{_first_line(error)} (files outside the source cannot be read)")
        if isinstance(error, duckdb.ParserException):
            return SqlSyntaxError(_first_line(error))
        return SqlError(_first_line(error))

    def _tables(self) -> list[TableInfo]:
        rows = self.connection.execute(
            "SELECT table_schema, table_name, column_name, data_type FROM information_schema.columns"
            " WHERE table_catalog = current_database() ORDER BY table_schema, table_name, ordinal_position"
        ).fetchall()
        tables: dict[tuple[str, str], TableInfo] = {}
        for schema, name, column, kind in rows:
            tables.setdefault((schema, name), TableInfo(schema, name)).columns.append((column, kind))
        return list(tables.values())


# -- shared ----------------------------------------------------------------------------


def bind(sql: str, params: Mapping[str, Any], dialect: Any) -> tuple[str, Any]:
    """``sql`` with ``:name`` placeholders in the driver's style, and the values to bind.
    Values are always bound by the driver, never formatted into the text."""
    from sqlalchemy import text
    from sqlalchemy.exc import ArgumentError, InvalidRequestError

    try:
        compiled = text(sql).compile(dialect=dialect)
    except (ArgumentError, InvalidRequestError) as error:
        raise SqlSyntaxError(_first_line(error)) from None
    missing = sorted(set(compiled.binds) - set(params))
    if missing:
        raise SqlRefused(f"the query uses :{missing[0]} but params has no '{missing[0]}' (values are bound, never pasted into the text)")
    values = compiled.construct_params(dict(params))
    unused = sorted(set(params) - set(compiled.binds))
    if unused:
        raise SqlRefused(f"params {', '.join(unused)} are not used by the query (write :{unused[0]} where it goes)")
    if compiled.positiontup is not None:
        return compiled.string, [values[name] for name in compiled.positiontup]
    return compiled.string, values


def _fetch(cursor: Any, max_rows: int) -> QueryResult:
    if cursor.description is None:
        return QueryResult([], [], False)
    columns = [str(d[0]) for d in cursor.description]
    rows = [tuple(row) for row in cursor.fetchmany(max_rows + 1)]
    return QueryResult(columns, rows[:max_rows], len(rows) > max_rows)


@contextlib.contextmanager
def _watchdog(seconds: float, interrupt: Callable[[], None]) -> Iterator[threading.Event]:
    """Call ``interrupt`` once if the block outlives ``seconds``; the event says it fired."""
    fired = threading.Event()

    def fire() -> None:
        fired.set()
        with contextlib.suppress(Exception):  # the query may have just finished
            interrupt()

    timer = threading.Timer(seconds, fire)
    timer.daemon = True
    timer.start()
    try:
        yield fired
    finally:
        timer.cancel()


def _project_path(source: SqlSource, database: str) -> Path:
    path = Path(database.removeprefix("file:").split("?", 1)[0])
    return path if path.is_absolute() else (source.root / path)


def _schema_of(entry: str, default: str) -> str:
    schema, _, _ = entry.rpartition(".")
    return schema or default


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    if not text:
        return type(error).__name__
    first = next(line for line in text.splitlines() if line.strip())
    # drivers put the useful part first; SQLAlchemy appends "(Background on this error at: ...)"
    return first.split(" (Background on this error", 1)[0][:500]


def column_names(tables: Sequence[TableInfo]) -> dict[str, list[str]]:
    """Qualified table name -> its column names."""
    return {t.qualified: [c for c, _ in t.columns] for t in tables}
