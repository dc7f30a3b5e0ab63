"""Opening a batch journal: PostgreSQL when a database URL is given, else an SQLite file.

Apart from :mod:`runner.batch.journal` (the interface both implementations build on) so that
interface does not import its implementations.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from runner.batch.journal import BatchJournal


def open_batch_journal(
    path: str | Path,
    *,
    task: str,
    input_path: Path,
    input_sha256: str,
    options: Mapping[str, Any] | None = None,
    restart: bool = False,
    durable: bool = False,
    database_url: str | None = None,
) -> BatchJournal:
    """Open or create the journal ``path`` for this task and input; in PostgreSQL when
    ``database_url`` is given, else in the SQLite file ``path``.

    An existing journal for another task, input content or input options is refused
    (:class:`UsageError`) unless ``restart`` deletes it and starts over; its batch id and
    provider state are then kept in :attr:`BatchJournal.discarded`, in the same transaction.
    """
    wanted = {
        "task": task,
        "input_path": str(Path(input_path).resolve()),
        "input_sha256": input_sha256,
        "options": json.dumps(dict(options or {}), sort_keys=True),
    }
    if database_url:
        from runner.batch.journal_postgres import PostgresJournal

        return PostgresJournal.connect(database_url, Path(path), wanted, restart=restart, durable=durable)
    from runner.batch.journal_sqlite import SqliteJournal

    return SqliteJournal.connect(Path(path), wanted, restart=restart, durable=durable)


def batch_journal_exists(path: str | Path, *, database_url: str | None = None) -> bool:
    """Whether journal ``path`` was ever created: its file, or its name in the database."""
    if database_url:
        from runner.batch.journal_postgres import journal_exists

        return journal_exists(database_url, str(path))
    return Path(path).is_file()
