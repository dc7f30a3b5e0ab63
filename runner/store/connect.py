"""Opening a store: an SQLite file for a path, PostgreSQL for a ``postgresql://`` URL.

Apart from :mod:`runner.store.database` (the interface and the SQLite implementation) so the
PostgreSQL implementation, which builds on that interface, is not imported by it.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from runner.env_seconds import env_seconds
from runner.errors import UsageError
from runner.store.database import DEFAULT_BUSY_SECONDS, Database, SqliteDatabase, is_postgres_url

BUSY_SECONDS_ENV = "RUNNER_STORE_BUSY_SECONDS"
"""How many seconds a command waits for another process's lock on an SQLite store (the run
store, a cap ledger) before it stops with exit 1."""
MAX_BUSY_SECONDS = 86_400.0


def open_database(target: str | Path, *, read_only: bool = False, role: str = "run store") -> Database:
    """An SQLite file for a path, PostgreSQL for a ``postgresql://`` URL. ``read_only``: an
    existing SQLite file opened read-only (its mode and contents left as they are); PostgreSQL
    sessions that only read (``default_transaction_read_only``). ``role`` names what the file
    holds in error messages ("run store", "cap ledger")."""
    if is_postgres_url(target):
        from runner.store.postgres import PostgresDatabase

        database = PostgresDatabase(str(target))
        if read_only:
            database.execute("SET default_transaction_read_only = on", idempotent=True)
            database.on_reconnect(lambda again: again.execute("SET default_transaction_read_only = on"))
        return database
    try:
        return SqliteDatabase(Path(target), busy_seconds=store_busy_seconds(), read_only=read_only, role=role)
    except (OSError, sqlite3.Error) as exc:
        raise UsageError(f"cannot open the store {target}: {exc}") from None


def store_busy_seconds() -> float:
    """``$RUNNER_STORE_BUSY_SECONDS`` as a number of seconds (default :data:`DEFAULT_BUSY_SECONDS`; 0 allowed);
    :class:`UsageError` naming the variable for a value that is not a number of seconds."""
    return env_seconds(BUSY_SECONDS_ENV, DEFAULT_BUSY_SECONDS, MAX_BUSY_SECONDS, example=30, zero=True)
