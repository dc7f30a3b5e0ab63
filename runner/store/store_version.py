"""Which runner wrote an SQLite run store: ``PRAGMA user_version``, stamped when the store is made.

A store from a newer runner may hold tables this runner would misread (or alter), so it is
refused with the file and the fix; one from an older runner gains its missing columns
(:meth:`runner.store.database.Database.create`) and is stamped. Raise :data:`STORE_VERSION`
only for a change an older runner cannot read; added columns do not need it.
"""

from __future__ import annotations

from runner.errors import StoreDamaged
from runner.store.database import Database

STORE_VERSION = 1
"""The run-store layout this runner reads and writes."""


def refuse_newer(db: Database) -> None:
    """Raise :class:`StoreDamaged` when ``db`` (SQLite) was written by a runner with a newer layout."""
    if db.dialect != "sqlite":
        return
    found = int(db.rows("PRAGMA user_version")[0]["user_version"])
    if found > STORE_VERSION:
        raise StoreDamaged(
            f"{db.where} (the run store) was written by a newer runner (store version {found}; this runner reads up to "
            f"{STORE_VERSION}); upgrade runner, or keep that store and give this one another place "
            f"(--store PATH, or RUNNER_STATE_DIR)"
        )


def stamp(db: Database) -> None:
    """Record :data:`STORE_VERSION` in a store made (or brought up to date) by this runner."""
    if db.dialect == "sqlite" and int(db.rows("PRAGMA user_version")[0]["user_version"]) < STORE_VERSION:
        db.execute(f"PRAGMA user_version = {STORE_VERSION}")
