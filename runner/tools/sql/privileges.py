"""What a source's account may do on the server beyond reading its tables: runner refuses the
server-side functions it knows (:mod:`runner.tools.sql.guard`), but an account that may read
the server's files (PostgreSQL superuser, or a member of ``pg_read_server_files``,
``pg_write_server_files``, ``pg_execute_server_program``) is one function name away from them.
``runner validate --sources`` connects to each source and says so; the fix is the operator's:
give the source an account without those roles.
"""

from __future__ import annotations

from pathlib import Path

from runner.tools.sql.backends import SqlAlchemyBackend, open_backend
from runner.tools.sql.source import SqlSource, resolved_url

SERVER_ROLES = ("pg_read_server_files", "pg_write_server_files", "pg_execute_server_program")
_QUERY = (
    "SELECT current_user AS who, (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) AS superuser, "
    + ", ".join(f"pg_has_role(current_user, '{role}', 'MEMBER') AS {role}" for role in SERVER_ROLES)
)


def server_file_access(source: SqlSource, workspace: Path) -> str | None:
    """Why ``source``'s account can reach the server's files, or ``None`` (also for backends
    without server files: SQLite, DuckDB). Raises :class:`~runner.errors.ToolFailure` (a
    missing secret, an unreachable source)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    url = resolved_url(source, {})
    try:
        if make_url(url).get_backend_name() != "postgresql":
            return None  # SQLite and DuckDB sources are files runner opens read-only, with file access off
    except (ArgumentError, ValueError):
        return None  # the source's own check says what is wrong with its URL
    with open_backend(source, url, workspace) as database:
        if not isinstance(database, SqlAlchemyBackend):
            return None
        cursor = database.connection.cursor()
        try:
            cursor.execute(_QUERY)
            row = dict(zip([c.name for c in cursor.description], cursor.fetchone(), strict=True))
        finally:
            cursor.close()
            database.connection.rollback()
    held = (["superuser"] if row["superuser"] else []) + [role for role in SERVER_ROLES if row[role]]
    if not held:
        return None
    return (
        f"the account '{row['who']}' can read the server's files ({', '.join(held)}); runner refuses the file functions "
        "it knows, but give this source an account without superuser and pg_read_server_files"
    )
