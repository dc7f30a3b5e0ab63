"""The built-in tools, one module each, registered like any other tool."""

from __future__ import annotations

from runner.tools.base import Tool


def builtin_tools() -> list[Tool]:
    """Every built-in tool (heavy libraries are imported only when a tool runs)."""
    from runner.tools.builtins import (
        calculator,
        chart,
        clock,
        fetch,
        files,
        python,
        shell,
        sql_query,
        table_query,
        tables,
        terminate,
    )

    return [
        python.run_python,
        shell.run_shell,
        files.read_file,
        files.write_file,
        files.list_files,
        fetch.fetch_url,
        calculator.calculator,
        clock.current_time,
        terminate.terminate,
        tables.load_table,
        tables.describe_table,
        table_query.query_table,
        chart.chart,
        sql_query.sql_query,
    ]
