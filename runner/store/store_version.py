"""Which runner wrote a run store: stamped when the store is made. SQLite keeps it in
``PRAGMA user_version``; PostgreSQL has no such field, so a one-row table holds it
(``store_meta``, key ``store_version``).

A store from a newer runner may hold tables this runner would misread (or alter), so it is
refused with the store and the fix; one from an older runner gains its missing columns
(:meth:`runner.store.database.Database.create`) and is stamped. Raise :data:`STORE_VERSION`
only for a change an older runner cannot read; added columns do not need it.
"""

from __future__ import annotations

from runner.errors import StoreDamaged
from runner.store.database import Database
from runner.store.schema import Schema

STORE_VERSION = 1
"""The run-store layout this runner reads and writes."""
META_TABLE = "store_meta"
"""The PostgreSQL table that holds the stamp (an SQLite store uses ``PRAGMA user_version``)."""
META = Schema(f"CREATE TABLE IF NOT EXISTS {META_TABLE} (key {{text}} PRIMARY KEY, value {{text}} NOT NULL)")
_KEY = "store_version"


def found_version(db: Database) -> int:
    """The layout version ``db`` was stamped with (0: never stamped, as earlier runners left it)."""
    if db.dialect == "sqlite":
        return int(db.rows("PRAGMA user_version")[0]["user_version"])
    if not db.columns(META_TABLE):
        return 0
    row = db.row(f"SELECT value FROM {META_TABLE} WHERE key = ?", (_KEY,))
    try:
        return int(row["value"]) if row else 0
    except ValueError:  # not a number this runner wrote: treat it as unknown, i.e. newer
        return STORE_VERSION + 1


def refuse_newer(db: Database) -> None:
    """Raise :class:`StoreDamaged` when ``db`` was written by a runner with a newer layout."""
    found = found_version(db)
    if found > STORE_VERSION:
        fix = "--store PATH, or RUNNER_STATE_DIR" if db.dialect == "sqlite" else "another database in $RUNNER_STORE_URL"
        raise StoreDamaged(
            f"{db.where} (the run store) was written by a newer runner (store version {found}; this runner reads up to "
            f"{STORE_VERSION}); upgrade runner, or keep that store and give this one another place ({fix})"
        )


def stamp(db: Database) -> None:
    """Record :data:`STORE_VERSION` in a store made (or brought up to date) by this runner."""
    if db.dialect == "sqlite":
        if found_version(db) < STORE_VERSION:
            db.execute(f"PRAGMA user_version = {STORE_VERSION}")
        return
    if found_version(db) >= STORE_VERSION:
        return
    db.create(META)
    db.atomic(_write_stamp)  # idempotent: a repeat after a dropped connection writes the same row


def _write_stamp(db: Database) -> None:
    db.execute(f"INSERT INTO {META_TABLE} (key, value) VALUES (?, ?) ON CONFLICT (key) DO NOTHING", (_KEY, "0"))
    db.execute(
        f"UPDATE {META_TABLE} SET value = ? WHERE key = ? AND CAST(value AS INTEGER) < ?", (str(STORE_VERSION), _KEY, STORE_VERSION)
    )
