"""Built-in ``sql_query``: the model reads a declared SQL source, read-only.

Without ``sql`` it lists the tables and columns it may read; with ``sql`` it runs one read
query (values bound from ``params``), shows the rows as markdown (cut at ``max_rows``, with a
note) and can keep them as a table for ``query_table`` and ``chart``. A write, a timeout or a
syntax error is a failed call the model sees, naming the query.
"""

from __future__ import annotations

from typing import Any

from runner.tools import table_store
from runner.tools.base import ToolContext, ToolResult, tool
from runner.tools.settings import SQL_DEFAULT_MAX_ROWS as DEFAULT_MAX_ROWS
from runner.tools.settings import SQL_QUERY_SETTINGS
from runner.tools.sql.query import Param, describe, run_query, to_frame

SETTINGS = SQL_QUERY_SETTINGS


@tool(settings_schema=SETTINGS)
def sql_query(
    ctx: ToolContext,
    sql: str | None = None,
    source: str | None = None,
    params: dict[str, Param] | None = None,
    save_as: str | None = None,
) -> ToolResult:
    """Read a SQL database (read-only). Call it without sql first to see the tables and columns.

    Args:
        sql: One SELECT query. Put values in params and refer to them as :name in the query.
        source: The source to query (default: the only one).
        params: Values for the query's :name placeholders.
        save_as: Also keep the rows as a table with this name (for query_table and chart).
    """
    settings = ctx.settings_for("sql_query")
    sources = ctx.sql.only(settings.get("sources"))
    chosen = sources.get(source)
    allow = list(settings.get("allow", ()))
    if sql is None:
        return _schema(ctx, sources, chosen, allow)
    if save_as is not None:
        table_store.table_path(save_as)  # check the name before running anything
    max_rows = int(settings.get("max_rows", DEFAULT_MAX_ROWS))
    result = run_query(
        sources, ctx.workspace, chosen, sql, params, max_rows=max_rows,
        timeout_seconds=settings.get("timeout_seconds"), allow=allow,
    )  # fmt: skip
    frame = to_frame(result)
    shown = min(max_rows, chosen.max_rows)
    note = f"\n\nNote: the query returned more than {shown:,} rows; only the first {shown:,} are shown. Aggregate or filter in SQL." if result.truncated else ""
    saved = ""
    if save_as is not None:
        table_store.save_table(ctx.workspace, save_as, frame, quota_bytes=ctx.disk_quota_bytes)
        saved = f" Saved as table '{save_as}'."
    content = f"{len(frame)} row(s) from source '{chosen.name}'.{saved}{note}\n\n{table_store.to_markdown(frame, max_rows=shown)}"
    data: dict[str, Any] = {
        "source": chosen.name,
        "columns": [str(c) for c in frame.columns],
        "records": table_store.records(frame, shown),
        "truncated": result.truncated,
    }
    if save_as is not None:
        data["table"] = save_as
    return ToolResult(content=content, data=data)


def _schema(ctx: ToolContext, sources: Any, chosen: Any, allow: list[str]) -> ToolResult:
    tables = describe(sources, ctx.workspace, chosen, allow)
    lines = [f"Source '{chosen.name}'" + (f": {chosen.description}" if chosen.description else "")]
    lines += [f"- {t.qualified} ({', '.join(f'{c} {k}' for c, k in t.columns)})" for t in tables]
    if not tables:
        lines.append("(no tables this agent may read)")
    others = sorted(set(sources.sources) - {chosen.name})
    if others:
        lines.append(f"Other sources: {', '.join(others)}")
    data = {"source": chosen.name, "tables": [{"table": t.qualified, "columns": [c for c, _ in t.columns]} for t in tables]}
    return ToolResult(content="\n".join(lines), data=data)
