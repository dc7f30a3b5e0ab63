"""Seed a database with the sample sales (examples/data/sales.csv) for tasks.d/daily_report_pg.yaml.

Creates (or replaces) the table ``sales`` with typed columns (``date`` DATE, money as
NUMERIC(12, 2), ``returned`` BOOLEAN) plus ``line``, the row's position in the CSV, and
loads every row. On PostgreSQL it can also create a login role that may only read it::

    export SALES_DB_ADMIN_URL=postgresql+psycopg://owner:PASSWORD@127.0.0.1:5432/runner_sales
    export SALES_DB_READER_PASSWORD=...        # any strong password
    python scripts/seed_sales_db.py --url-env SALES_DB_ADMIN_URL \\
        --reader runner_reader --reader-password-env SALES_DB_READER_PASSWORD

The reader role gets CONNECT, USAGE on the schema and SELECT on ``sales`` only, and its
transactions default to read-only. Secrets come from the named variables, never from
arguments (they would show in ``ps``). Needs ``pip install 'runner[sql]'``.
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
COLUMNS = ("date", "order_id", "region", "channel", "product_category", "units", "unit_price", "revenue", "cost", "returned")
ROLE = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url-env", required=True, help="variable holding the SQLAlchemy URL of a role that may create the table")
    parser.add_argument("--csv", type=Path, default=ROOT / "examples" / "data" / "sales.csv")
    parser.add_argument("--reader", help="PostgreSQL: create or update this login role, allowed only to read sales")
    parser.add_argument("--reader-password-env", help="variable holding the reader's password")
    args = parser.parse_args(argv)
    url = os.environ.get(args.url_env, "")
    if not url:
        parser.error(f"the variable {args.url_env} is not set")
    if args.reader and not (ROLE.match(args.reader) and args.reader_password_env and os.environ.get(args.reader_password_env)):
        parser.error("--reader needs a lower-case role name and --reader-password-env naming a set variable")
    rows = read_rows(args.csv)
    from sqlalchemy import create_engine

    engine = create_engine(url)
    try:
        with engine.begin() as connection:
            table = create_table(connection)
            connection.execute(table.insert(), rows)
            if args.reader:
                grant_reader(connection, args.reader, os.environ[args.reader_password_env])
    finally:
        engine.dispose()
    print(f"seeded {len(rows):,} rows into sales ({engine.url.render_as_string(hide_password=True)})")
    return 0


def read_rows(path: Path) -> list[dict[str, Any]]:
    """The CSV's rows, typed: exact decimals for money, integers, booleans, dates as ISO text."""
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        if tuple(reader.fieldnames or ()) != COLUMNS:
            raise SystemExit(f"{path}: expected the columns {', '.join(COLUMNS)}")
        return [_typed(line, row) for line, row in enumerate(reader, start=1)]


def _typed(line: int, row: dict[str, str]) -> dict[str, Any]:
    import datetime as dt

    return {
        "line": line,
        "date": dt.date.fromisoformat(row["date"]),
        "order_id": row["order_id"],
        "region": row["region"],
        "channel": row["channel"],
        "product_category": row["product_category"],
        "units": int(row["units"]),
        "unit_price": Decimal(row["unit_price"]),
        "revenue": Decimal(row["revenue"]),
        "cost": Decimal(row["cost"]),
        "returned": row["returned"] == "true",
    }


def create_table(connection: Any) -> Any:
    from sqlalchemy import Boolean, Column, Date, Integer, MetaData, Numeric, Table, Text

    metadata = MetaData()
    table = Table(
        "sales", metadata,
        Column("line", Integer, primary_key=True, autoincrement=False),
        Column("date", Date, nullable=False, index=True),
        Column("order_id", Text, nullable=False),
        Column("region", Text, nullable=False),
        Column("channel", Text, nullable=False),
        Column("product_category", Text, nullable=False),
        Column("units", Integer, nullable=False),
        Column("unit_price", Numeric(12, 2), nullable=False),
        Column("revenue", Numeric(12, 2), nullable=False),
        Column("cost", Numeric(12, 2), nullable=False),
        Column("returned", Boolean, nullable=False),
    )  # fmt: skip
    metadata.drop_all(connection, checkfirst=True)
    metadata.create_all(connection)
    return table


def grant_reader(connection: Any, role: str, password: str) -> None:
    """A login role that can read ``sales`` and nothing else, read-only by default."""
    from psycopg import sql
    from sqlalchemy import text

    if connection.dialect.name != "postgresql":
        raise SystemExit("--reader is for PostgreSQL")
    exists = connection.execute(text("SELECT 1 FROM pg_roles WHERE rolname = :role"), {"role": role}).first()
    database = connection.execute(text("SELECT current_database()")).scalar_one()
    name = sql.Identifier(role)
    # DDL takes no bound parameters: psycopg quotes the name and the password as SQL literals
    statements = [
        sql.SQL("{} ROLE {} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE PASSWORD {}").format(
            sql.SQL("ALTER" if exists else "CREATE"), name, sql.Literal(password)
        ),
        sql.SQL("REVOKE ALL ON SCHEMA public FROM {}").format(name),
        sql.SQL("GRANT CONNECT ON DATABASE {} TO {}").format(sql.Identifier(database), name),
        sql.SQL("GRANT USAGE ON SCHEMA public TO {}").format(name),
        sql.SQL("GRANT SELECT ON sales TO {}").format(name),
        sql.SQL("ALTER ROLE {} SET default_transaction_read_only = on").format(name),
    ]
    driver = connection.connection.driver_connection
    for statement in statements:
        connection.exec_driver_sql(statement.as_string(driver).replace("%", "%%"))


if __name__ == "__main__":
    sys.exit(main())
