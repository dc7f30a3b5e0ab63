"""The batch journal in PostgreSQL (see :mod:`runner.batch.journal`): shared by every worker.

Every journal's rows live in the tables ``journal_rows`` and ``journal_meta`` under the
journal's name (the path it would have as a file), so a retry on any worker that names the
same database and journal resumes it. The tables and transitions are
:mod:`runner.batch.journal_sql`'s, the same as the SQLite journal's; this module adds the
name and the lock.

One process at a time: a session-level advisory lock keyed by the journal's name, taken
with ``pg_try_advisory_lock`` when the journal opens and held by its connection.
PostgreSQL releases it when that session ends: on :meth:`close`, when the process dies
(its socket closes), or when its host goes silent (TCP keepalives end the session in about
a minute). A second process is refused, naming the session that holds the journal. When
the connection drops and comes back (:mod:`runner.store.postgres`), the lock is taken again
before anything else is written; if another process took the journal meanwhile, this one
stops with an error saying so.

Durability is the server's (``synchronous_commit``); ``durable=True`` makes sure it is on.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import socket
from collections.abc import Mapping
from pathlib import Path

from runner.batch.journal_sql import JournalLayout, SqlJournal, open_tables
from runner.errors import UsageError
from runner.store.database import Database
from runner.store.postgres import PostgresDatabase


def layout(name: str) -> JournalLayout:
    """Journal ``name``'s rows in the tables every journal of the database shares."""
    return JournalLayout(rows="journal_rows", meta="journal_meta", name=name)


class PostgresJournal(SqlJournal):
    """The journal named ``path`` in a PostgreSQL database, locked by its connection's session."""

    def __init__(self, path: Path, database: PostgresDatabase) -> None:
        super().__init__(path, database, layout(str(path)))
        self.name = str(path)
        self._postgres = database
        self._open = True

    @classmethod
    def connect(cls, url: str, path: Path, wanted: Mapping[str, str], *, restart: bool, durable: bool) -> PostgresJournal:
        """Connect, lock the journal ``path`` (refusing a second process), (with ``restart``:
        delete it,) then create or check it."""
        name = str(path)
        database = PostgresDatabase(url, application_name=f"runner batch {socket.gethostname()} pid {os.getpid()}"[:63])
        try:
            _lock(database, name)
            database.on_reconnect(lambda db: _lock(db, name, again=True))
            if durable:
                database.execute("SET synchronous_commit = on", idempotent=True)
                database.on_reconnect(lambda db: db.execute("SET synchronous_commit = on"))
            discarded = open_tables(database, layout(name), f"journal {name} in {database.where}", wanted, restart=restart)
        except BaseException:
            database.close()
            raise
        journal = cls(path, database)
        journal.discarded = discarded
        return journal

    def close(self) -> None:
        if self._open:
            self._open = False
            import psycopg

            from runner.errors import StoreUnavailable

            # Released here, not left to the session's end: the server ends a closed session in its
            # own time, and the next process to open this journal may be faster. On a broken
            # connection the session's end releases it.
            with contextlib.suppress(psycopg.Error, StoreUnavailable):
                self._postgres.execute("SELECT pg_advisory_unlock(?)", (lock_key(self.name),))
            self._postgres.close()


def journal_exists(url: str, name: str) -> bool:
    """Whether the journal ``name`` was created in the database at ``url``."""
    database = PostgresDatabase(url)
    try:
        table = database.row("SELECT to_regclass('journal_meta') IS NOT NULL AS present")
        if table is None or not table["present"]:
            return False
        return database.row("SELECT 1 AS found FROM journal_meta WHERE journal = ? LIMIT 1", (name,)) is not None
    finally:
        database.close()


def lock_key(name: str) -> int:
    """The advisory lock of journal ``name``: 64 bits of a SHA-256 (the same on every worker)."""
    return int.from_bytes(hashlib.sha256(f"runner journal:{name}".encode()).digest()[:8], "big", signed=True)


def _lock(database: Database, name: str, *, again: bool = False) -> None:
    key = lock_key(name)
    taken = database.row("SELECT pg_try_advisory_lock(?) AS taken", (key,))
    if taken is None or not taken["taken"]:
        if again:
            raise UsageError(
                f"journal {name} in {database.where}: while the connection to the store was down, another batch "
                f"process took this journal{_holder(database, key)}; this one stops so that no row runs twice "
                "(the other process carries on with it)"
            )
        raise UsageError(
            f"journal {name} in {database.where}: another batch process is using this journal{_holder(database, key)}; "
            "wait for it to end"
        )


def _holder(database: Database, key: int) -> str:
    """`` (session 1234, 'runner batch host pid 99' from 10.0.0.7)``, or nothing if it cannot be seen."""
    high, low = (key >> 32) & 0xFFFFFFFF, key & 0xFFFFFFFF  # how pg_locks shows a bigint advisory key
    found = database.row(
        "SELECT a.pid, a.application_name, a.client_addr::text AS client FROM pg_locks l"
        " JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory' AND l.granted"
        " AND l.classid::bigint = ? AND l.objid::bigint = ? AND l.objsubid = 1 LIMIT 1",
        (high, low),
    )
    if found is None:
        return ""
    client = f" from {found['client']}" if found.get("client") else ""
    return f" (session {found['pid']}, {found['application_name']!r}{client})"
