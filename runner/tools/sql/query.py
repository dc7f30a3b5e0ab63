"""One query on one source, from a tool: connect, run, name the query in any failure."""

from __future__ import annotations

import datetime as dt
import decimal
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runner.errors import ToolFailure
from runner.tools.sql.backends import QueryResult, TableInfo, open_backend
from runner.tools.sql.errors import SqlError, missing_driver, naming
from runner.tools.sql.source import SqlSource, SqlSources

if TYPE_CHECKING:
    import pandas as pd

Param = str | int | float | bool | None


def run_query(
    sources: SqlSources,
    workspace: Path,
    source: SqlSource,
    sql: str,
    params: Mapping[str, Param] | None = None,
    *,
    max_rows: int | None = None,
    timeout_seconds: float | None = None,
    allow: Sequence[str] = (),
) -> QueryResult:
    """Run ``sql`` read-only on ``source`` with bound ``params``, at most ``max_rows`` rows
    (default and ceiling: the source's) and ``timeout_seconds`` (likewise). Failures are
    :class:`~runner.tools.sql.errors.SqlError` naming the source and the query."""
    rows = min(max_rows or source.max_rows, source.max_rows)
    timeout = min(timeout_seconds or source.timeout_seconds, source.timeout_seconds)
    try:
        with open_backend(source, _url(sources, source), workspace) as database:
            database.restrict(allow)
            return database.query(sql, dict(params or {}), rows, timeout)
    except SqlError as error:
        raise naming(error, source.name, sql) from None
    except ModuleNotFoundError as error:
        raise naming(missing_driver(error), source.name, sql) from None


def describe(sources: SqlSources, workspace: Path, source: SqlSource, allow: Sequence[str] = ()) -> list[TableInfo]:
    """The tables and columns of ``source`` a query may read."""
    try:
        with open_backend(source, _url(sources, source), workspace) as database:
            database.restrict(allow)
            return database.tables()
    except ModuleNotFoundError as error:
        raise missing_driver(error) from None
    except SqlError as error:
        raise type(error)(f"cannot list the tables of source '{source.name}': {error}") from None


def _url(sources: SqlSources, source: SqlSource) -> str:
    try:
        return sources.url(source)
    except ToolFailure:
        raise
    except Exception:  # a malformed URL: SQLAlchemy's message may quote it, password and all
        raise ToolFailure(f"source '{source.name}' ({source.where}): its URL is not a valid SQLAlchemy URL") from None


def to_frame(result: QueryResult) -> pd.DataFrame:
    """The rows as a DataFrame typed like a CSV's: exact decimals as floats, dates as ISO
    text (``2026-11-30``), UUIDs as text; timestamps stay timestamps."""
    import pandas as pd

    columns = _unique(result.columns)
    return pd.DataFrame.from_records([tuple(_plain(v) for v in row) for row in result.rows], columns=columns)


def _plain(value: Any) -> Any:
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, dt.date) and not isinstance(value, dt.datetime):
        return value.isoformat()
    if isinstance(value, dt.time | uuid.UUID):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    return value


def _unique(columns: list[str]) -> list[str]:
    """Column names made unique (``count``, ``count_2``): a table cannot hold two of one name."""
    seen: dict[str, int] = {}
    out = []
    for name in columns:
        seen[name] = seen.get(name, 0) + 1
        out.append(name if seen[name] == 1 else f"{name}_{seen[name]}")
    return out
