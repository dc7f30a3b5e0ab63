"""Fixtures for batch tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from runner.batch.inputs import InputSource, file_sha256
from runner.batch.journal import BatchJournal
from runner.batch.journal_open import open_batch_journal
from tests.batch.batch_fakes import write_csv


@pytest.fixture
def journal_url(backend: str, request: pytest.FixtureRequest) -> str | None:
    """Where journals live: ``None`` is an SQLite file, else a fresh PostgreSQL database's URL;
    every test that uses it runs on both backends (``backend`` is parametrized by tests/postgres.py)."""
    return None if backend == "sqlite" else str(request.getfixturevalue("postgres_url"))


@pytest.fixture
def make_batch(tmp_path: Path, journal_url: str | None) -> Iterator[Callable[..., tuple[InputSource, BatchJournal]]]:
    """``make_batch(rows, restart=False)`` -> (source, journal) over a CSV of ``rows`` in tmp_path,
    the journal in SQLite or (``journal_url``) in PostgreSQL."""
    opened: list[BatchJournal] = []

    def make(rows: list[dict[str, Any]] | None = None, *, restart: bool = False, name: str = "in.csv"):
        path = tmp_path / name
        if rows is not None:
            write_csv(path, rows)
        source = InputSource.open(path, id_column="id")
        journal = open_batch_journal(
            tmp_path / "journal.sqlite3",
            task="triage",
            input_path=path,
            input_sha256=file_sha256(path),
            options=source.options(),
            restart=restart,
            database_url=journal_url,
        )
        opened.append(journal)
        return source, journal

    yield make
    for journal in opened:
        journal.close()
