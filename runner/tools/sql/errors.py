"""Why a query failed, as types: each one is an observation for the model or a step error.

All are :class:`~runner.errors.ToolFailure`, so the registry turns them into a failed tool
call the model sees (never a traceback). :func:`naming` puts the query into the message.
"""

from __future__ import annotations

from runner.errors import ToolFailure

QUERY_EXCERPT_CHARS = 300


class SqlError(ToolFailure):
    """The database refused or failed the query (a missing column, a type error, ...)."""

    kind = "sql_error"


class SqlSyntaxError(SqlError):
    """The query is not valid SQL for this database."""

    kind = "sql_syntax"


class SqlRefused(SqlError):
    """A write, a command, several statements, or a table outside the allow list."""

    kind = "sql_refused"


class SqlTimeout(SqlError):
    """The query ran past the source's statement timeout and was cancelled."""

    kind = "sql_timeout"


class SqlConnectionError(SqlError):
    """The source could not be reached or opened (the message never holds its password)."""

    kind = "sql_connection"


def naming(error: SqlError, source: str, sql: str) -> SqlError:
    """``error`` with a message naming the source and the query."""
    query = " ".join(sql.split())
    if len(query) > QUERY_EXCERPT_CHARS:
        query = query[: QUERY_EXCERPT_CHARS - 1] + "…"
    label = {
        "sql_refused": "refused",
        "sql_timeout": "timed out",
        "sql_syntax": "has a syntax error",
        "sql_connection": "could not run",
    }.get(error.kind, "failed")
    return type(error)(f"query on source '{source}' {label}: {error}\n  query: {query}")


def missing_driver(error: ModuleNotFoundError, what: str = "SQL sources") -> SqlConnectionError:
    """A clear failure for a driver that is not installed (``runner[sql]`` brings them)."""
    return SqlConnectionError(f"{what} need the Python package '{error.name}': pip install 'runner[sql]'")
