"""What a query may be: one read statement, naming only allowed tables and no server-side
function (checked with sqlglot).

Server-side functions read what no ``allow:`` list names: the server's files
(``pg_read_file``, ``pg_ls_dir``, ``pg_stat_file``, large-object imports ``lo_import``), its
settings (``current_setting``, ``pg_settings``), other databases (``dblink``) or act on the
server (``pg_terminate_backend``, ``pg_reload_conf``). Their families are refused in every
query, on every backend, allow list or not (:data:`SERVER_FUNCTIONS`, :data:`SERVER_VIEWS`);
a query that cannot be parsed is refused when its text calls one. Whether the account may call
them at all is the operator's part: ``runner validate --sources`` says when it can read server
files (PostgreSQL superuser or ``pg_read_server_files``).

This is the first of two layers. The database itself is opened read-only (see
:mod:`runner.tools.sql.backends`), so a write that slips past the parser still fails there;
the check here gives the model a clear refusal naming what it tried, and enforces the
source's ``allow`` list on the tables a query names.
"""

from __future__ import annotations

import re
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


SERVER_FUNCTIONS = frozenset({
    "current_setting", "set_config", "pg_current_logfile", "pg_notify", "pg_import_system_collations",
    "pg_stat_file", "loread", "lowrite", "load_extension", "readfile", "writefile", "edit", "fts3_tokenizer",
    "getenv", "read_text", "read_blob",
})  # fmt: skip
"""Functions that reach the server, its files or settings (PostgreSQL, SQLite, DuckDB)."""
SERVER_FUNCTION_PREFIXES = (
    "pg_read_", "pg_ls_", "pg_file_", "lo_", "dblink", "pg_terminate_", "pg_cancel_", "pg_reload_", "pg_rotate_",
    "pg_promote", "pg_switch_", "pg_create_", "pg_drop_", "pg_replication_", "pg_stat_reset", "pg_backup_",
    "pg_start_backup", "pg_stop_backup", "pg_logical_", "pg_log_", "pg_advisory_", "pg_try_advisory_", "pg_wal_replay_",
)  # fmt: skip
"""Function families by prefix: files, large objects, other databases, administration, locks."""
SERVER_VIEWS = frozenset({
    "pg_settings", "pg_file_settings", "pg_hba_file_rules", "pg_ident_file_mappings", "pg_authid", "pg_shadow",
    "pg_user_mapping", "pg_user_mappings", "pg_stat_activity", "pg_config", "duckdb_settings", "duckdb_secrets",
})  # fmt: skip
"""Catalog views that show the server's configuration, credentials or other sessions."""
_CALL = re.compile(r"([A-Za-z_][A-Za-z0-9_$]*)\s*\(")


def server_function(name: str) -> bool:
    """Whether ``name`` (any case, quotes removed) is a server-side function runner refuses."""
    name = name.strip('"`[]').lower()
    return name in SERVER_FUNCTIONS or name.startswith(SERVER_FUNCTION_PREFIXES)


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
        if called := next((m.group(1) for m in _CALL.finditer(sql) if server_function(m.group(1))), None):
            raise SqlRefused(f"function {called.lower()}() reaches the server itself (its files, settings or sessions), not the source's data") from None
        if allow:
            raise SqlRefused(f"the query cannot be parsed, so its tables cannot be checked against the allow list: {_first_line(error)}") from None
        return
    if not statements:
        raise SqlSyntaxError("the query is empty")
    if len(statements) > 1:
        raise SqlRefused(f"the query has {len(statements)} statements; send one SELECT at a time")
    statement = statements[0]
    _refuse_writes(statement, exp)
    _refuse_server_functions(statement, exp)
    if allow:
        _check_tables(statement, dialect, allow, exp)


def _refuse_writes(statement: Any, exp: Any) -> None:
    if not isinstance(statement, exp.Query):
        raise SqlRefused(f"only read queries (SELECT, WITH ... SELECT) run here; {_kind(statement)} is refused (the source is read-only)")
    writes = (exp.Insert, exp.Update, exp.Delete, exp.Merge, exp.Create, exp.Drop, exp.Alter, exp.Command, exp.Into)
    for node in statement.walk():
        if isinstance(node, writes):
            raise SqlRefused(f"the query contains {_kind(node)}; the source is read-only")


def _refuse_server_functions(statement: Any, exp: Any) -> None:
    for function in statement.find_all(exp.Func):
        name = str(function.this.this if isinstance(function.this, exp.Identifier) else function.this) if isinstance(function, exp.Anonymous) else function.sql_name()
        if server_function(name):
            raise SqlRefused(f"function {name.lower()}() reaches the server itself (its files, settings or sessions), not the source's data")
    for table in statement.find_all(exp.Table):
        if isinstance(table.this, exp.Identifier) and table.name.lower() in SERVER_VIEWS:
            raise SqlRefused(f"'{table.name}' shows the server's configuration or sessions, not the source's data")


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
