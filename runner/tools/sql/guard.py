"""What a query may be: one read statement, naming only allowed tables (checked with sqlglot).

This is the first of two layers. The database itself is opened read-only (see
:mod:`runner.tools.sql.database`), so a write that slips past the parser still fails there;
the check here gives the model a clear refusal naming what it tried, and enforces the
source's ``allow`` list on the tables a query names.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from runner.tools.sql.errors import SqlRefused, SqlSyntaxError

# SQLAlchemy backend name -> sqlglot dialect
DIALECTS = {
    "postgresql": "postgres", "sqlite": "sqlite", "duckdb": "duckdb", "mysql": "mysql", "mariadb": "mysql",
    "mssql": "tsql", "oracle": "oracle", "snowflake": "snowflake", "bigquery": "bigquery", "trino": "trino",
    "redshift": "redshift", "databricks": "databricks", "clickhouse": "clickhouse",
}  # fmt: skip
# Functions that run SQL given as text (so the tables they read are not visible to a parser).
_SQL_RUNNING_FUNCTIONS = frozenset({
    "query", "query_table", "query_to_xml", "query_to_xml_and_xmlschema", "query_to_xmlschema", "table_to_xml",
    "table_to_xml_and_xmlschema", "cursor_to_xml", "schema_to_xml", "database_to_xml", "dblink", "dblink_exec",
})  # fmt: skip


@dataclass(frozen=True)
class TableName:
    """A table as a query names it, normalised (unquoted names folded as the database folds them)."""

    schema: str | None
    name: str

    def __str__(self) -> str:
        return f"{self.schema}.{self.name}" if self.schema else self.name


_CASE_INSENSITIVE = frozenset({None, "sqlite", "duckdb", "mysql", "tsql"})


@dataclass(frozen=True)
class AllowList:
    """Allowed tables: ``schema.table``, ``schema.*`` or ``table`` (in the default schema).

    Entries are read as unquoted SQL names of ``dialect`` (PostgreSQL folds them to lower
    case, so ``Sales`` allows ``sales`` but not ``"Sales"``); on databases whose names ignore
    case, so does the comparison.
    """

    entries: tuple[str, ...]
    default_schema: str
    dialect: str | None = None

    def permits(self, table: TableName) -> bool:
        fold = self.dialect in _CASE_INSENSITIVE
        schema = _fold(table.schema or self.default_schema, fold)
        name = _fold(table.name, fold)
        for entry in self.entries:
            want_schema, _, want_name = entry.rpartition(".")
            want_schema = _fold(_unquoted(want_schema or self.default_schema, self.dialect), fold)
            if want_schema == schema and (want_name == "*" or _fold(_unquoted(want_name, self.dialect), fold) == name):
                return True
        return False


def _unquoted(name: str, dialect: str | None) -> str:
    """``name`` as the database stores an unquoted identifier (PostgreSQL: lower case)."""
    return name.lower() if dialect in ("postgres", "redshift") else name.upper() if dialect in ("snowflake", "oracle") else name


def _fold(name: str, fold: bool) -> str:
    return name.lower() if fold else name


def check_read_query(sql: str, dialect: str | None, allow: Sequence[AllowList] = ()) -> None:
    """Refuse anything but one read-only query naming allowed tables.

    Raises :class:`SqlRefused` (a write, a command, several statements, a table outside the
    allow list) or :class:`SqlSyntaxError`. A query sqlglot cannot parse is left to the
    database unless there is an allow list (which then cannot be checked).
    """
    import sqlglot
    from sqlglot import exp
    from sqlglot.errors import ParseError, TokenError

    try:
        statements = [s for s in sqlglot.parse(sql, read=dialect) if s is not None]
    except (ParseError, TokenError) as error:
        if allow:
            raise SqlRefused(f"the query cannot be parsed, so its tables cannot be checked against the allow list: {_first_line(error)}") from None
        return
    if not statements:
        raise SqlSyntaxError("the query is empty")
    if len(statements) > 1:
        raise SqlRefused(f"the query has {len(statements)} statements; send one SELECT at a time")
    statement = statements[0]
    _refuse_writes(statement, exp)
    if allow:
        _check_tables(statement, dialect, allow, exp)


def _refuse_writes(statement: Any, exp: Any) -> None:
    if not isinstance(statement, exp.Query):
        raise SqlRefused(f"only read queries (SELECT, WITH ... SELECT) run here; {_kind(statement)} is refused (the source is read-only)")
    writes = (exp.Insert, exp.Update, exp.Delete, exp.Merge, exp.Create, exp.Drop, exp.Alter, exp.Command, exp.Into)
    for node in statement.walk():
        if isinstance(node, writes):
            raise SqlRefused(f"the query contains {_kind(node)}; the source is read-only")


def _check_tables(statement: Any, dialect: str | None, allow: Sequence[AllowList], exp: Any) -> None:
    from sqlglot.optimizer.normalize_identifiers import normalize_identifiers

    statement = normalize_identifiers(statement, dialect=dialect)
    ctes = {cte.alias_or_name for cte in statement.find_all(exp.CTE)}
    for function in statement.find_all(exp.Func):
        name = (function.sql_name() if not isinstance(function, exp.Anonymous) else str(function.this)).lower()
        if name in _SQL_RUNNING_FUNCTIONS:
            raise SqlRefused(f"function {name}() runs SQL given as text, which the allow list cannot check")
    for table in statement.find_all(exp.Table):
        if not isinstance(table.this, exp.Identifier):
            raise SqlRefused(f"table functions ({table.this.sql(dialect=dialect)[:80]}) are not allowed with an allow list")
        if table.catalog:
            raise SqlRefused(f"'{table.sql(dialect=dialect)}' names a database; only tables of the source may be read")
        name = TableName(table.db or None, table.name)
        if name.schema is None and name.name in ctes:
            continue
        refused_by = [a for a in allow if not a.permits(name)]
        if refused_by:
            raise SqlRefused(f"table '{name}' is not in the allow list ({', '.join(refused_by[0].entries)})")


def _kind(node: Any) -> str:
    key = str(getattr(node, "key", type(node).__name__)).upper()
    return "SELECT ... INTO" if key == "INTO" else key


def _first_line(error: Exception) -> str:
    return str(error).strip().splitlines()[0][:300] if str(error).strip() else type(error).__name__


def allow_list(entries: Iterable[str], default_schema: str, dialect: str | None = None) -> AllowList | None:
    """An :class:`AllowList`, or ``None`` when ``entries`` is empty (everything allowed)."""
    entries = tuple(entries)
    return AllowList(entries, default_schema, dialect) if entries else None
