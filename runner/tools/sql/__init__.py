"""Read-only SQL over declared sources: what ``load_table`` and ``sql_query`` run on.

A :class:`~runner.tools.sql.source.SqlSource` says where the data is and how much one query
may take; :func:`~runner.tools.sql.backends.open_backend` connects to it read-only by
construction (a read-only transaction on PostgreSQL, ``mode=ro`` on SQLite, ``read_only``
on DuckDB); :func:`~runner.tools.sql.query.run_query` runs one statement with bound
parameters, a timeout and a row cap. SQLAlchemy, psycopg and duckdb are imported only when
a query runs (``pip install 'runner[sql]'``).
"""
