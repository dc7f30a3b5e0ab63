"""Built-in ``query_table``: filter, group, aggregate, sort and limit a named table.

The query is structured data, never an expression string: ``DataFrame.query``/``eval``
can run arbitrary code, so each filter is a ``{column, op, value}`` triple applied with
plain comparisons.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from runner.errors import ToolFailure
from runner.tools import table_store
from runner.tools.base import ToolContext, ToolResult, tool

if TYPE_CHECKING:
    import pandas as pd

Operator = Literal["==", "!=", "<", "<=", ">", ">=", "in", "not_in", "contains"]
Aggregation = Literal["sum", "mean", "count", "min", "max", "median"]
MAX_RECORDS = 1000


class Filter(BaseModel):
    """Keep rows where ``column op value`` holds."""

    model_config = ConfigDict(extra="forbid")

    column: str = Field(description="Column to test.")
    op: Operator = Field(description="Comparison; 'in'/'not_in' take a list, 'contains' a substring.")
    value: Any = Field(description="Value to compare with.")


@tool
def query_table(
    ctx: ToolContext,
    table: str,
    filters: tuple[Filter, ...] = (),
    group_by: tuple[str, ...] = (),
    aggregations: dict[str, Aggregation] | None = None,
    columns: tuple[str, ...] = (),
    sort_by: tuple[str, ...] = (),
    descending: bool = False,
    limit: Annotated[int, Field(ge=1, le=1_000_000)] | None = None,
    save_as: str | None = None,
) -> ToolResult:
    """Query a loaded table; the result is saved as a new table and shown as markdown.

    Steps run in this order: filters (all must hold), group_by with aggregations
    (output columns are named like "amount_sum"; group_by alone counts rows), columns
    (keep only these), sort_by, limit.

    Args:
        table: The table to query.
        filters: Conditions, e.g. [{"column": "region", "op": "==", "value": "EU"}].
        group_by: Columns to group by.
        aggregations: Column -> function (sum, mean, count, min, max, median).
        columns: Columns to keep in the result (default: all).
        sort_by: Columns to sort by.
        descending: Sort in descending order.
        limit: Keep at most this many rows.
        save_as: Name for the result table (default: "<table>_result").
    """
    frame = table_store.load_table(ctx.workspace, table)
    for condition in filters:
        frame = _apply_filter(frame, condition, table)
    if group_by or aggregations:
        frame = _aggregate(frame, list(group_by), aggregations or {}, table)
    if columns:
        table_store.require_columns(frame, list(columns), table)
        frame = frame[list(columns)]
    if sort_by:
        table_store.require_columns(frame, list(sort_by), table)
        frame = frame.sort_values(list(sort_by), ascending=not descending, kind="stable")
    if limit is not None:
        frame = frame.head(limit)
    frame = frame.reset_index(drop=True)
    name = save_as or f"{table}_result"
    frame = table_store.save_table(ctx.workspace, name, frame, quota_bytes=ctx.disk_quota_bytes)
    content = (
        f"Result saved as table '{name}': {len(frame)} rows x {len(frame.columns)} columns\n\n"
        f"{table_store.to_markdown(frame, max_rows=30)}"
    )
    data = {
        "table": name,
        "rows": len(frame),
        "columns": [str(c) for c in frame.columns],
        "records": table_store.records(frame, MAX_RECORDS),
        "truncated": len(frame) > MAX_RECORDS,
    }
    return ToolResult(content=content, data=data)


def _apply_filter(frame: pd.DataFrame, condition: Filter, table: str) -> pd.DataFrame:
    table_store.require_columns(frame, [condition.column], table)
    column = frame[condition.column]
    value = condition.value
    try:
        if condition.op in ("in", "not_in"):
            if not isinstance(value, list):
                raise ToolFailure(f"filter op '{condition.op}' needs a list value, got {value!r}")
            mask = column.isin(value)
            mask = ~mask if condition.op == "not_in" else mask
        elif condition.op == "contains":
            mask = column.astype(str).str.contains(str(value), regex=False, na=False)
        else:
            mask = _compare(column, condition.op, value)
    except TypeError as error:
        raise ToolFailure(
            f"cannot compare column '{condition.column}' ({column.dtype}) with {value!r}: {error}"
        ) from None
    return frame[mask]


def _compare(column: pd.Series, op: str, value: Any) -> pd.Series:
    if op == "==":
        return column == value
    if op == "!=":
        return column != value
    if op == "<":
        return column < value
    if op == "<=":
        return column <= value
    if op == ">":
        return column > value
    return column >= value


def _aggregate(frame: pd.DataFrame, group_by: list[str], aggregations: Mapping[str, str], table: str) -> pd.DataFrame:
    import pandas as pd

    table_store.require_columns(frame, group_by + list(aggregations), table)
    named = {f"{column}_{function}": (column, function) for column, function in aggregations.items()}
    try:
        if not group_by:
            row = {name: frame[column].agg(function) for name, (column, function) in named.items()}
            return pd.DataFrame([row])
        grouped = frame.groupby(group_by, dropna=False, sort=True)
        if not named:
            return grouped.size().reset_index(name="count")
        return grouped.agg(**named).reset_index()
    except TypeError as error:
        raise ToolFailure(f"cannot aggregate table '{table}': {error}") from None
