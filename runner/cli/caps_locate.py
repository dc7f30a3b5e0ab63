"""Where ``runner caps`` finds a cap ledger and the run store that records its calls.

The ledger: ``--store`` (a PostgreSQL URL or an existing SQLite file), else
``$RUNNER_STORE_URL``, else the one fan-out ledger (``caps.sqlite3``) under the Airflow work
directory (``$RUNNER_AIRFLOW_WORK_DIR``, default ``/tmp/runner-airflow``; one per fan-out, at
``<work dir>/<dag>/<16 hex>/<fan-out id>/caps.sqlite3``). Several there: the error lists them.

The run store (what was recorded of a dead holder's calls): ``--runs``, else the ledger's own
database when it holds one (the PostgreSQL store), else the project's ``runs.sqlite3`` in its
state directory (``<root>/.runner``, or ``$RUNNER_STATE_DIR``) when it exists. Without one,
nothing is known to be recorded, so every dead reservation stays at its worst case.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from runner.core.usage import Usage
from runner.errors import UsageError
from runner.store.database import Database

NO_LEDGER_HINT = (
    "pass --store with a fan-out's caps.sqlite3 (<work dir>/<dag>/<16 hex>/<fan-out id>/caps.sqlite3) or a "
    "postgresql:// URL, or set RUNNER_STORE_URL"
)
RUNS_HINT = "pass --runs with the run store the fan-out's shards wrote (<project>/.runner/runs.sqlite3) or a postgresql:// URL"
LISTED = 10  # ledgers named in the error when several are found


def ledger_target(given: str | None) -> str | Path:
    """``--store`` (a PostgreSQL URL, or an existing SQLite file), else ``$RUNNER_STORE_URL``,
    else the only fan-out ledger under the Airflow work directory."""
    from runner.store.database import resolve_store, store_url_from_env

    if given is not None:
        return store_target("--store", given)
    if store_url_from_env() is not None:
        return resolve_store(default=Path())  # refuses a value that is not a PostgreSQL URL
    return _fanout_ledger()


def store_target(flag: str, given: str) -> str | Path:
    """A flag's store: a PostgreSQL URL, or the path of an existing SQLite file."""
    from runner.store.database import is_postgres_url, redacted_url

    if is_postgres_url(given):
        return given
    if "://" in given:
        raise UsageError(
            f"{flag} {redacted_url(given)!r} is not a PostgreSQL URL: use postgresql://USER@HOST[:PORT]/DATABASE, "
            "or the path of an SQLite file"
        )
    if not Path(given).is_file():
        raise UsageError(f"{flag} {given}: no such file; " + (NO_LEDGER_HINT if flag == "--store" else RUNS_HINT))
    return Path(given)


def _fanout_ledger() -> Path:
    from runner.local_state import DEFAULT_FANOUT_WORK_DIR, FANOUT_WORK_DIR_ENV

    work = os.environ.get(FANOUT_WORK_DIR_ENV) or DEFAULT_FANOUT_WORK_DIR
    local = work.removeprefix("local://").removeprefix("file://")
    looked = f"${FANOUT_WORK_DIR_ENV} ({work})"
    found = [] if "://" in local else sorted(Path(local).glob("*/*/*/caps.sqlite3"), key=_age)  # SQLite ledgers are local
    if not found:
        raise UsageError(f"no cap ledger given: {NO_LEDGER_HINT} (no fan-out's caps.sqlite3 under {looked} either)")
    if len(found) > 1:
        more = f"\n  ... and {len(found) - LISTED} more" if len(found) > LISTED else ""
        listed = "\n  ".join(str(p) for p in found[:LISTED])
        raise UsageError(f"no cap ledger given, and {len(found)} fan-out ledgers under {looked}; pass --store with one "
                         f"of them (newest first):\n  {listed}{more}")  # fmt: skip
    return found[0]


def _age(path: Path) -> float:
    try:
        return -path.stat().st_mtime
    except OSError:
        return 0.0


@dataclass
class RunStoreLookup:
    """What a run store recorded of each run's calls, by reservation (empty without a store)."""

    database: Database | None
    owned: bool  # opened here (closed by :meth:`close`), not the ledger's own database

    @property
    def where(self) -> str | None:
        return self.database.where if self.database is not None else None

    def __call__(self, run_id: str) -> Mapping[str, Usage | None]:
        from runner.store.runstore import recorded_calls

        return recorded_calls(self.database, run_id) if self.database is not None else {}

    def close(self) -> None:
        if self.owned and self.database is not None:
            self.database.close()


def run_store_lookup(ledger: Database, given: str | None, root: Path) -> RunStoreLookup:
    """The run store for ``ledger``'s calls, opened read-only (see the module doc)."""
    from runner.local_state import state_dir
    from runner.store.connect import open_database

    if given is not None:
        return RunStoreLookup(open_database(store_target("--runs", given), read_only=True), owned=True)
    if ledger.columns("model_calls"):
        return RunStoreLookup(ledger, owned=False)
    default = state_dir(root.resolve()) / "runs.sqlite3"
    if default.is_file():
        return RunStoreLookup(open_database(default, read_only=True), owned=True)
    return RunStoreLookup(None, owned=False)
