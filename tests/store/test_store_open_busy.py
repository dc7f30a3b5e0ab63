"""Opening a complete PostgreSQL store runs no DDL, so it never waits on (or deadlocks with)
other workers' open transactions: concurrent fan-out shards opening the shared store while
others write to it (CREATE INDEX IF NOT EXISTS locks its table even when the index exists)."""

from __future__ import annotations

import threading

import psycopg

from runner.store.cap_ledger import CapLedger
from runner.store.postgres import _CREATED, PostgresDatabase
from runner.store.runstore import RunStore
from runner.store.transcripts import SCHEMA as TRANSCRIPTS


def test_a_complete_store_opens_while_another_worker_holds_its_tables(postgres_url: str) -> None:
    RunStore(postgres_url).close()  # the tables exist
    CapLedger(PostgresDatabase(postgres_url)).db.close()
    tables = [found[1] for s in TRANSCRIPTS.statements("postgresql") if " TABLE " in s and (found := _CREATED.match(s))]
    with psycopg.connect(postgres_url) as busy:  # a worker mid-transaction, writing: ROW EXCLUSIVE on every table
        for table in ("runs", "model_calls", "tool_calls", *tables):
            busy.execute(f"LOCK TABLE {table} IN ROW EXCLUSIVE MODE")  # type: ignore[arg-type]  # trusted names
        opened = threading.Event()

        def open_store() -> None:
            RunStore(postgres_url).close()
            CapLedger(PostgresDatabase(postgres_url)).db.close()
            opened.set()

        worker = threading.Thread(target=open_store, daemon=True)
        worker.start()
        worker.join(60)  # a hang bound, not a speed check: a blocked open waits for the transaction below
        held = not opened.is_set()
        busy.rollback()
    worker.join(60)
    assert not held, "opening a complete store waited on another worker's transaction (DDL ran)"
    assert opened.is_set()


def test_a_store_missing_a_column_still_gains_it(postgres_url: str) -> None:
    RunStore(postgres_url).close()
    with psycopg.connect(postgres_url, autocommit=True) as db:
        db.execute("ALTER TABLE model_calls DROP COLUMN cached")
    RunStore(postgres_url).close()
    with psycopg.connect(postgres_url) as db:
        columns = {r[0] for r in db.execute("SELECT column_name FROM information_schema.columns WHERE table_name = 'model_calls'")}
    assert "cached" in columns
