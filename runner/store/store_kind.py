"""Whose database a run store or a cap ledger is, looked at without writing: the commands that
only read (``runner runs``, ``runs show``, ``runs prune --dry-run``, ``runner stats``, ``runner
report``, ``runner budgets``, ``runner caps show``) open a store read-only, and every command
first makes sure a file it is pointed at is runner's before anything (not even SQLite's journal
mode) is written to it.

* runner's store, complete: read as it is.
* runner's store from an earlier runner (a table or column missing): brought up to date by the
  writable open that follows, as any command would.
* another application's database (tables, but no ``runs`` table with runner's columns; for a
  ledger, no ``cap_scopes`` table with runner's columns): refused with
  :class:`~runner.errors.StoreDamaged`, the file untouched.
* an empty database: nothing to read yet (a read-only command says so).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from runner.errors import StoreDamaged
from runner.store.database import Database
from runner.store.schema import Schema

RUN_COLUMNS = frozenset({"run_id", "task", "status", "started_at", "finished_at", "inputs_json"})
"""Columns every runner's ``runs`` table has had; a ``runs`` table without them is not runner's."""
_CREATED = re.compile(r"CREATE\s+(?:UNIQUE\s+)?(?:TABLE|INDEX)\s+IF\s+NOT\s+EXISTS\s+(\w+)", re.IGNORECASE)


def tables(db: Database) -> set[str]:
    """The tables (and, for SQLite, indexes) of ``db``'s main schema."""
    if db.dialect == "sqlite":
        return {str(r["name"]) for r in db.rows("SELECT name FROM sqlite_master WHERE type IN ('table', 'index')")}
    query = ("SELECT tablename AS name FROM pg_tables WHERE schemaname = current_schema()"
             " UNION SELECT indexname FROM pg_indexes WHERE schemaname = current_schema()")  # fmt: skip
    return {str(r["name"]) for r in db.rows(query)}


def refuse_foreign(db: Database, role: str = "run store") -> bool:
    """Raise :class:`StoreDamaged` when ``db`` holds another application's tables; ``True``
    when it holds runner's ``runs`` table, ``False`` when it has no ``runs`` table yet."""
    names = tables(db)
    if "runs" in names:
        missing = RUN_COLUMNS - db.columns("runs")
        if not missing:
            return True
        reason = f"its table 'runs' has no column(s) {', '.join(sorted(missing))}"
    elif db.dialect == "sqlite" and names:
        shown = ", ".join(sorted(names)[:5]) + (", ..." if len(names) > 5 else "")
        reason = f"it holds other tables ({shown}) and no 'runs' table"
    else:
        return False  # an empty file, or a PostgreSQL database shared with other applications
    fix = "--store PATH, or RUNNER_STATE_DIR" if db.dialect == "sqlite" else "another database in $RUNNER_STORE_URL"
    raise StoreDamaged(f"{db.where} is not a {role} ({reason}); it was left as it was: give runner its own ({fix})")


LEDGER_COLUMNS = frozenset({"key", "max_cost_usd", "spent_cost_usd", "reserved_cost_usd", "created_at"})
"""Columns every runner's ``cap_scopes`` table has had; a ``cap_scopes`` table without them is not runner's."""


def refuse_foreign_ledger(db: Database, role: str = "cap ledger") -> None:
    """Raise :class:`StoreDamaged` when ``db`` cannot hold runner's cap ledger: its ``cap_scopes``
    table is of another shape, or (an SQLite file) it holds another application's tables and
    neither a ledger nor a run store of runner's."""
    names = {name for name in tables(db) if not name.startswith("sqlite_")}
    if "cap_scopes" in names:
        missing = LEDGER_COLUMNS - db.columns("cap_scopes")
        if not missing:
            return
        reason = f"its table 'cap_scopes' has no column(s) {', '.join(sorted(missing))}"
    elif db.dialect == "sqlite" and names and not ("runs" in names and db.columns("runs") >= RUN_COLUMNS):
        shown = ", ".join(sorted(names)[:5]) + (", ..." if len(names) > 5 else "")
        reason = f"it holds other tables ({shown}) and no 'cap_scopes' table"
    else:
        return  # an empty file, runner's run store, or a PostgreSQL database shared with other applications
    fix = "move it away, and runner starts a new one there" if db.dialect == "sqlite" else "another database in $RUNNER_STORE_URL"
    raise StoreDamaged(f"{db.where} is not a {role} ({reason}); it was left as it was: give runner its own ({fix})")


def complete(db: Database, schemas: Iterable[Schema]) -> bool:
    """Whether every table, index and added column of ``schemas`` exists in ``db``."""
    names = tables(db)
    for schema in schemas:
        created = [found.group(1) for s in schema.statements(db.dialect) if (found := _CREATED.match(s))]
        if any(name not in names for name in created):
            return False
        if any(column not in db.columns(table) for table, column, _ in schema.added_for(db.dialect)):
            return False
    return True
