"""Built-in ``load_table`` and ``describe_table``: bring data files in as named tables."""

from __future__ import annotations

import io
import re
from typing import TYPE_CHECKING, Any, Literal

from runner.errors import ToolFailure
from runner.tools import table_store
from runner.tools.base import ToolContext, ToolResult, tool
from runner.tools.paths import read_workspace_file, workspace_file_size

if TYPE_CHECKING:
    import pandas as pd

MAX_INPUT_BYTES = 200 * 1024 * 1024
Param = str | int | float | bool | None
TableFormat = Literal["csv", "tsv", "json", "jsonl", "parquet"]
_SUFFIXES: dict[str, TableFormat] = {
    "csv": "csv", "tsv": "tsv", "json": "json", "jsonl": "jsonl", "ndjson": "jsonl",
    "parquet": "parquet", "pq": "parquet",
}  # fmt: skip


@tool
def load_table(
    ctx: ToolContext,
    path: str | None = None,
    name: str | None = None,
    format: TableFormat | None = None,
    source: str | None = None,
    query: str | None = None,
    params: dict[str, Param] | None = None,
) -> ToolResult:
    """Load a CSV, TSV, JSON, JSONL or Parquet file from the workspace, or the result of a
    SQL query on a declared source, as a named table.

    The table stays available to describe_table, query_table and chart for the rest of
    the run. Returns its shape, columns, types and first rows.

    Args:
        path: The data file, relative to the workspace (or give query instead).
        name: Name for the table (default: the file name without extension; for a query, "query").
        format: File format (default: from the file extension).
        source: The SQL source to query (default: the only one declared).
        query: One read-only SQL query; values go in params and are named :name in the query.
        params: Values bound to the query's :name placeholders (never pasted into its text).
    """
    if (path is None) == (query is None):
        raise ToolFailure("give either path (a workspace file) or query (SQL on a source), not both")
    if query is not None:
        return _load_query(ctx, query, params or {}, source, name or "query")
    if source is not None or params:
        raise ToolFailure("source and params go with query; a file is loaded with path alone")
    assert path is not None
    table = name or _default_name(path)
    table_store.table_path(table)  # check the name before reading anything
    fmt = format or _format_from_suffix(path)
    size = workspace_file_size(ctx.workspace, path)
    if size > MAX_INPUT_BYTES:
        raise ToolFailure(f"'{path}' is {size} bytes; load_table reads at most {MAX_INPUT_BYTES}")
    frame = _parse(read_workspace_file(ctx.workspace, path, MAX_INPUT_BYTES), fmt, path)
    return _loaded(ctx, table, frame, f"from {path}")


def _load_query(ctx: ToolContext, query: str, params: dict[str, Param], source_name: str | None, table: str) -> ToolResult:
    from runner.tools.sql.query import run_query, to_frame

    table_store.table_path(table)
    source = ctx.sql.get(source_name)
    result = run_query(ctx.sql, ctx.workspace, source, query, params)
    note = (
        f"\n\nNote: the query returned more than {source.max_rows:,} rows; only the first {source.max_rows:,} "
        f"were loaded (the source's max_rows)."
        if result.truncated
        else ""
    )
    loaded = _loaded(ctx, table, to_frame(result), f"from a query on source '{source.name}'", note)
    return ToolResult(content=loaded.content, data={**loaded.data, "source": source.name, "truncated": result.truncated})


def _loaded(ctx: ToolContext, table: str, frame: pd.DataFrame, origin: str, note: str = "") -> ToolResult:
    frame = table_store.save_table(ctx.workspace, table, frame, quota_bytes=ctx.disk_quota_bytes)
    summary = _summary(table, frame)
    content = (
        f"Loaded table '{table}' {origin}: {len(frame)} rows x {len(frame.columns)} columns{note}\n\n"
        f"Columns: {', '.join(f'{c} ({t})' for c, t in summary['dtypes'].items())}\n\n"
        f"First rows:\n{table_store.to_markdown(frame, 5)}"
    )
    return ToolResult(content=content, data=summary)


@tool
def describe_table(ctx: ToolContext, table: str) -> ToolResult:
    """Summary statistics of a loaded table: counts, missing values, mean, min, max, etc.

    Args:
        table: The name of a table created by load_table or query_table.
    """
    frame = table_store.load_table(ctx.workspace, table)
    if frame.columns.empty:
        raise ToolFailure(f"table '{table}' has no columns")
    stats = frame.describe(include="all").transpose()
    stats.insert(0, "missing", frame.isna().sum())
    stats.insert(0, "dtype", frame.dtypes.astype(str))
    stats = stats.reset_index(names="column")
    content = (
        f"Table '{table}': {len(frame)} rows x {len(frame.columns)} columns\n\n"
        f"{table_store.to_markdown(stats, max_rows=200)}"
    )
    data = {**_summary(table, frame), "statistics": table_store.records(stats, 1000)}
    return ToolResult(content=content, data=data)


def _summary(table: str, frame: pd.DataFrame) -> dict[str, Any]:
    return {
        "table": table,
        "rows": len(frame),
        "columns": [str(c) for c in frame.columns],
        "dtypes": table_store.dtypes(frame),
        "head": table_store.records(frame, 5),
    }


def _default_name(path: str) -> str:
    stem = path.rsplit("/", 1)[-1].split(".", 1)[0]
    name = re.sub(r"[^A-Za-z0-9_-]", "_", stem)
    return name if name[:1].isalpha() or name[:1] == "_" else f"t_{name}"


def _format_from_suffix(path: str) -> TableFormat:
    suffix = path.rsplit(".", 1)[-1].lower() if "." in path else ""
    if suffix not in _SUFFIXES:
        raise ToolFailure(
            f"cannot tell the format of '{path}' from its extension; pass format "
            f"(one of {', '.join(sorted(set(_SUFFIXES.values())))})"
        )
    return _SUFFIXES[suffix]


def _parse(data: bytes, fmt: TableFormat, path: str) -> pd.DataFrame:
    import pandas as pd

    buffer = io.BytesIO(data)
    try:
        if fmt in ("csv", "tsv"):
            return pd.read_csv(buffer, sep="\t" if fmt == "tsv" else ",")
        if fmt == "parquet":
            return table_store.read_parquet(data, path)
        return pd.read_json(buffer, lines=fmt == "jsonl")
    except (ValueError, OSError) as error:
        raise ToolFailure(f"cannot read '{path}' as {fmt}: {error}") from None
