"""The batch journal in PostgreSQL (see :mod:`runner.batch.journal`): shared by every worker.

Every journal's rows live in the tables ``journal_rows`` and ``journal_meta`` under the
journal's name (the path it would have as a file), so a retry on any worker that names the
same database and journal resumes it. The tables and transitions are
:mod:`runner.batch.journal_sql`'s, the same as the SQLite journal's; this module adds the
name and the lock.

One process at a time: a session-level advisory lock keyed by the journal's name, taken
with ``pg_try_advisory_lock`` when the journal opens and held by its connection, and a row
in ``journal_holders`` naming the holder (with a token of its own). PostgreSQL releases the
lock when that session ends: on :meth:`close`, when the process dies (its socket closes),
when an administrator ends it, or when its host goes silent (TCP keepalives end the session
in about a minute). A second process is refused, naming the session that holds the journal.

When the connection drops and comes back (:mod:`runner.store.postgres`), the lock is taken
again before anything else is written, but only if the row still names this process: every
process that takes the journal writes its own row and one that ends deletes it, so a row
still naming this one proves nobody held the journal in between. Otherwise (another process
holds it now, or held it meanwhile and has ended) this one stops with
:class:`~runner.errors.JournalLockLost` (exit 2), and every later write refuses the same way,
so two batches never write one journal.

Durability is the server's (``synchronous_commit``); ``durable=True`` makes sure it is on.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import socket
import uuid
from collections.abc import Mapping
from pathlib import Path

from runner.batch.journal_sql import JournalLayout, SqlJournal, open_tables
from runner.errors import JournalLockLost, RunnerError, UsageError
from runner.store.database import Database
from runner.store.postgres import PostgresDatabase
from runner.store.session_lock import Retaken, SessionLock, who

LOCK = SessionLock(table="journal_holders", column="journal", namespace="runner journal")
"""Each journal's lock: the advisory lock, and who holds it in ``journal_holders``."""
HOLDERS = LOCK.schema


def layout(name: str) -> JournalLayout:
    """Journal ``name``'s rows in the tables every journal of the database shares."""
    return JournalLayout(rows="journal_rows", meta="journal_meta", name=name)


class PostgresJournal(SqlJournal):
    """The journal named ``path`` in a PostgreSQL database, locked by its connection's session."""

    def __init__(self, path: Path, database: PostgresDatabase, holder: str = "") -> None:
        super().__init__(path, database, layout(str(path)))
        self.name = str(path)
        self.holder = holder  # this process's row in journal_holders (JSON)
        self._postgres = database
        self._open = True

    @classmethod
    def connect(cls, url: str, path: Path, wanted: Mapping[str, str], *, restart: bool, durable: bool) -> PostgresJournal:
        """Connect, lock the journal ``path`` (refusing a second process), (with ``restart``:
        delete it,) then create or check it."""
        name = str(path)
        database = PostgresDatabase(url, application_name=f"runner batch {socket.gethostname()} pid {os.getpid()}"[:63])
        holder = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "token": uuid.uuid4().hex})
        try:
            database.create(HOLDERS)
            database.atomic(lambda db: _lock(db, name, holder))  # a drop half way takes it again, whole
            database.on_reconnect(lambda db: _lock_again(db, name, holder))
            if durable:
                database.execute("SET synchronous_commit = on", idempotent=True)
                database.on_reconnect(lambda db: db.execute("SET synchronous_commit = on"))
            open_tables(database, layout(name), f"journal {name} in {database.where}", wanted, restart=restart)
        except BaseException:
            database.close()
            raise
        return cls(path, database, holder)

    def close(self) -> None:
        if self._open:
            self._open = False
            import psycopg

            # Released here, not left to the session's end: the server ends a closed session in its
            # own time, and the next process to open this journal may be faster. On a broken
            # connection the session's end releases it; a journal whose lock was lost keeps the
            # other holder's row (only this process's own row is deleted).
            with contextlib.suppress(psycopg.Error, RunnerError):
                LOCK.release(self._postgres, self.name, self.holder)
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


def _lock(database: Database, name: str, holder: str) -> None:
    """Take journal ``name``'s lock and write this process's row (:class:`UsageError` naming the holder)."""
    if not LOCK.take(database, name, holder, dt.datetime.now(dt.UTC).isoformat()):
        raise UsageError(
            f"journal {name} in {database.where}: another batch process is using this journal"
            f"{LOCK.session(database, name)}; wait for it to end"
        )


def _lock_again(database: Database, name: str, holder: str) -> None:
    """After a dropped connection: the lock again, if nobody held the journal in between;
    else :class:`JournalLockLost` (the new session keeps nothing: the caller drops it)."""
    retaken = LOCK.take_again(database, name, holder)
    if retaken is Retaken.HELD_BY_ANOTHER:
        raise JournalLockLost(_lost(name, database.where, f"another batch process took this journal"
                                    f"{LOCK.session(database, name)} and holds it now"))  # fmt: skip
    if retaken is Retaken.HELD_MEANWHILE:
        other = who(LOCK.holder(database, name))
        raise JournalLockLost(_lost(name, database.where, f"another batch process{other} took this journal meanwhile and has ended"))


def _lost(name: str, where: str, what: str) -> str:
    return (
        f"journal {name} in {where}: this batch's session in the store was ended (terminated, or the connection "
        f"dropped), which released the journal's lock, and {what}. This batch stops so that no row runs twice or is "
        "recorded by two batches; the rows it completed are kept in the journal. Run the same command again once "
        "the other batch has ended: it resumes what is left"
    )
